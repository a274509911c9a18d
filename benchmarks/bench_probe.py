"""Probe bandwidth vs a bare NIXL two-agent WRITE loop, agent start-up and memory.

Run: python benchmarks/bench_probe.py [--pages 64] [--runs 5]

- A decode-role ``kvcheck agent`` (llama-3.1-8b, TP 2: 64 regions of 16 KiB pages) with
  ``--pages 64`` holds 64 MiB, so the uniform plan's one segment moves 64 MiB.
- The probe (``kvcheck.nixl.probe``) writes that segment ``--runs`` times; the median
  segment bandwidth is compared with a bare NIXL loop in this process: two agents (this
  process and a child), same 4096 descriptors of 16 KiB, WRITE + wait, ``--runs`` times.
  Target: probe >= 0.9 x bare.
- Agent start: wall time from spawn to the ready line, and NIXL agent creation inside it.
  Metadata exchange: one listener fetch + parse. Agent peak memory beyond its regions:
  VmHWM of the agent process minus the bytes it registered (target < 150 MB).
- Registration of 64 small regions: the agent's ``register_s`` (one ``register_memory``
  call per memory kind), beside a bare NIXL agent registering the same 64 regions in one
  call and in 64 calls, and the cost of ``import torch`` (what ``register_s`` used to
  include: GPU detection imported torch before registering; target: register_s < 1 s).
- Idle CPU: share of one core the agent uses over 3 idle seconds (/proc/PID/stat;
  target < 0.2; NIXL's progress thread alone spins a whole core).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.nixl_helpers import UNIFORM, AgentProc, free_port, write_pair  # noqa: E402

BARE_TARGET = r"""
import sys, time, numpy as np
from nixl_cu12._api import nixl_agent, nixl_agent_config
port, size = int(sys.argv[1]), int(sys.argv[2])
a = nixl_agent('bare-target', nixl_agent_config(enable_listen_thread=True, listen_port=port))
buf = np.zeros(size, dtype=np.uint8)
a.register_memory([(buf.ctypes.data, size, 0, '')], 'DRAM')
print('ready', buf.ctypes.data, flush=True)
time.sleep(120)
"""


def vm_hwm(pid: int) -> int:
    """Peak resident set (bytes) of ``pid`` from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def bare_loop(size: int, item: int, runs: int) -> list[float]:
    """Bandwidths (bytes/s) of a bare two-agent NIXL WRITE of ``size`` bytes in ``item``-byte descriptors."""
    import numpy as np
    from nixl_cu12._api import nixl_agent, nixl_agent_config

    from kvcheck.nixl.transport import fetch_listener_blob

    port = free_port()
    child = subprocess.Popen([sys.executable, "-c", BARE_TARGET, str(port), str(size)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={**os.environ, "UCX_LOG_LEVEL": "error"})
    try:
        for _ in range(20):
            line = child.stdout.readline()
            if line.startswith("ready"):
                break
        remote_addr = int(line.split()[1])
        a = nixl_agent("bare-initiator", nixl_agent_config(backends=["UCX"]))
        src = np.full(size, 7, dtype=np.uint8)
        a.register_memory([(src.ctypes.data, size, 0, "")], "DRAM")
        name = a.add_remote_agent(fetch_listener_blob("127.0.0.1", port))
        a.make_connection(name)
        n = size // item
        local = a.prep_xfer_dlist("NIXL_INIT_AGENT", [(src.ctypes.data + i * item, item, 0) for i in range(n)], "DRAM")
        remote = a.prep_xfer_dlist(name, [(remote_addr + i * item, item, 0) for i in range(n)], "DRAM")
        out = []
        idx = list(range(n))
        for r in range(runs):
            h = a.make_prepped_xfer("WRITE", local, idx, remote, idx, f"bare_{r}".encode())
            t0 = time.perf_counter()
            state = a.transfer(h)
            while state == "PROC":
                state = a.check_xfer_state(h)
            dt = time.perf_counter() - t0
            assert state == "DONE", state
            h.release()
            out.append(size / dt)
        local.release()
        remote.release()
        return out
    finally:
        child.kill()
        child.communicate()


REGISTER = r"""
import json, sys, time, numpy as np
from nixl_cu12._api import nixl_agent, nixl_agent_config
a = nixl_agent('bench-reg', nixl_agent_config(enable_prog_thread=False, backends=['UCX']))
n, size = 64, 65536
arena = np.zeros(n * size, dtype=np.uint8)
base = arena.ctypes.data
t = time.perf_counter()
d = a.register_memory([(base + i * size, size, i, '') for i in range(n)], 'DRAM')
one = time.perf_counter() - t
a.deregister_memory(d)
t = time.perf_counter()
ds = [a.register_memory([(base + i * size, size, i, '')], 'DRAM') for i in range(n)]
many = time.perf_counter() - t
print(json.dumps({"one_call_s": one, "calls_64_s": many}))
"""


def registration_figures() -> dict:
    """Bare NIXL: 64 regions in one register_memory call vs 64 calls; and import torch."""
    out = json.loads(subprocess.run([sys.executable, "-c", REGISTER], capture_output=True, text=True, check=True,
                                    env={**os.environ, "UCX_LOG_LEVEL": "error", "NIXL_LOG_LEVEL": "WARN"}).stdout.strip().splitlines()[-1])
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    out["import_torch_s"] = time.monotonic() - t if r.returncode == 0 else None
    return out


def idle_cpu_share(pid: int, seconds: float = 3.0) -> float:
    """Share of one core ``pid`` used over ``seconds`` (utime + stime from /proc)."""
    def cpu() -> float:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    c0, t0 = cpu(), time.monotonic()
    time.sleep(seconds)
    return (cpu() - c0) / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("UCX_LOG_LEVEL", "error")

    from kvcheck.nixl.probe import build_job, run_probe
    from kvcheck.nixl.transport import read_agents
    from kvcheck.preflight import run_preflight
    from kvcheck.sglang.geometry import derive_geometry
    from kvcheck.sources import load_side

    tmp = Path(tempfile.mkdtemp(prefix="kvcheck-bench-"))
    p_yaml, d_yaml = write_pair(tmp, *UNIFORM)
    t0 = time.monotonic()
    agent = AgentProc("decode", d_yaml, "--listen", "127.0.0.1:0", "--pages", str(args.pages), ttl=600)
    start_wall = time.monotonic() - t0
    try:
        time.sleep(0.5)
        idle = idle_cpu_share(agent.proc.pid)
        registered = agent.info["registered_bytes"]
        t1 = time.monotonic()
        fetched = read_agents(agent.listen, timeout=5)[0]
        exchange = time.monotonic() - t1

        p, d = load_side(str(p_yaml), "prefill"), load_side(str(d_yaml), "decode")
        report = run_preflight(p, d)
        pg, dg = derive_geometry(p), derive_geometry(d)
        probe_bw, probe_steps = [], None
        for _ in range(args.runs):
            job = build_job(report.plan, pg, dg, agent.listen, pages=args.pages, timeout=10)
            res = run_probe(job)
            assert res.ok, [f.message for f in res.findings]
            seg = res.segments[0]
            assert seg["verified"]
            probe_bw.append(seg["bandwidth_Bps"])
            probe_steps = res.steps
            seg_bytes = seg["bytes"]
        hwm = vm_hwm(agent.proc.pid)
    finally:
        agent.stop()
    item = pg.regions[0].item_len
    bare_bw = bare_loop(seg_bytes, item, args.runs)
    pm, bm = statistics.median(probe_bw), statistics.median(bare_bw)
    figures = {
        "segment_bytes": seg_bytes,
        "descriptors": seg_bytes // item,
        "probe_bandwidth_GBps_median": pm / 1e9,
        "bare_nixl_bandwidth_GBps_median": bm / 1e9,
        "ratio_probe_over_bare": pm / bm,
        "target_ratio": 0.9,
        "agent_start_wall_s": start_wall,
        "agent_nixl_create_s": agent.info["timings"]["agent_start_s"],
        "agent_register_s": agent.info["timings"]["register_s"],
        "agent_gpu_detect_s": agent.info["timings"].get("gpu_detect_s"),
        "registration_bare_nixl": registration_figures(),
        "agent_idle_cpu_share": idle,
        "target_idle_cpu_share": 0.2,
        "metadata_exchange_s": exchange,
        "metadata_blob_bytes": fetched.meta.size,
        "probe_steps_s": probe_steps,
        "agent_peak_rss_MB": hwm / 1e6,
        "agent_registered_MB": registered / 1e6,
        "agent_peak_beyond_regions_MB": (hwm - registered) / 1e6,
        "target_beyond_regions_MB": 150,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
