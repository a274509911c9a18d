"""Mooncake probe bandwidth vs a bare Mooncake TransferEngine loop, in the same run.

Run: python benchmarks/bench_mooncake_probe.py [--pages 16] [--runs 5]

- A decode-role ``kvcheck agent --backend mooncake`` (llama-3.1-8b, TP 2, page 16: 64
  regions of 16 KiB pages) with ``--pages N`` in its own process.
- The probe (``kvcheck.mooncake.probe.run_probe``, a child process with its own engine)
  writes the plan's writes for every page (64 x N page writes, one batch) ``--runs``
  times; its ``seconds`` cover the batch write only.
- The bare loop: two TransferEngines in two processes (this one and a child holding a
  registered buffer of the same size), the same number of writes of the same length, one
  ``batch_transfer_sync_write``, ``--runs`` times.
- Reported: median bandwidth of each, and the ratio probe / bare (target >= 0.9: the probe
  adds digests and confirmation outside the timed batch only).
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
os.environ.setdefault("GLOG_minloglevel", "2")

BARE_PEER = r"""
import ctypes, json, sys, time
from kvcheck.mooncake.engine import load_engine
TransferEngine = load_engine()
sizes = json.loads(sys.argv[1])
e = TransferEngine(); assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
bufs = [ctypes.create_string_buffer(n) for n in sizes]
assert e.batch_register_memory([ctypes.addressof(b) for b in bufs], sizes) == 0
print(json.dumps({"session": f"127.0.0.1:{e.get_rpc_port()}", "addrs": [ctypes.addressof(b) for b in bufs]}), flush=True)
time.sleep(600)
"""


class BareLoop:
    """Two TransferEngines (this process and a child), each registering the same regions
    the agent and the probe do (one buffer per KV region), and the same writes."""

    def __init__(self, writes: list, src_sizes: list[int], dst_sizes: list[int]):
        import ctypes

        from kvcheck.mooncake.engine import load_engine

        TransferEngine = load_engine()
        self.peer = subprocess.Popen([sys.executable, "-c", BARE_PEER, json.dumps(dst_sizes)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        info = json.loads(self.peer.stdout.readline())
        self.e = TransferEngine()
        assert self.e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        self.bufs = [ctypes.create_string_buffer(b"\x5a" * n, n) for n in src_sizes]
        assert self.e.batch_register_memory([ctypes.addressof(b) for b in self.bufs], src_sizes) == 0
        self.session = info["session"]
        self.srcs = [ctypes.addressof(self.bufs[i]) + so for i, so, _, _, _ in writes]
        self.dsts = [info["addrs"][j] + do for _, _, j, do, _ in writes]
        self.lens = [n for *_, n in writes]
        assert self.e.batch_transfer_sync_write(self.session, self.srcs[:1], self.dsts[:1], self.lens[:1]) == 0  # open the session, as the probe does

    def once(self) -> float:
        t0 = time.perf_counter()
        assert self.e.batch_transfer_sync_write(self.session, self.srcs, self.dsts, self.lens) == 0
        return time.perf_counter() - t0

    def close(self) -> None:
        self.peer.kill()
        self.peer.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=16)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    from kvcheck.mooncake.probe import planned_writes, run_probe
    from kvcheck.sglang.geometry import derive_geometry
    from kvcheck.sources import load_side
    from tests.helpers import write_config

    tmp = Path(tempfile.mkdtemp())
    args = {"tp-size": 2, "page-size": 16}
    p = load_side(str(write_config(tmp, "prefill", "llama-3.1-8b", {"disaggregation-mode": "prefill", **args})), "prefill")
    dcfg = write_config(tmp, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", **args})
    d = load_side(str(dcfg), "decode")
    pg, dg = derive_geometry(p), derive_geometry(d)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    agent = subprocess.Popen([sys.executable, "-m", "kvcheck", "agent", "--backend", "mooncake", "--role", "decode", "-c", str(dcfg),
                              "--ttl", "300", "--pages", str(a.pages), "--protocol", "tcp"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        ready = json.loads(agent.stdout.readline())
        writes = planned_writes(pg, dg, a.pages, p.model.num_key_value_heads, None)
        job = {"target": ready["listen"], "timeout": 60, "pages": a.pages, "writes": writes, "protocol": "tcp",
               "src_item_lens": pg.item_lens, "dst_item_lens": dg.item_lens}
        total = sum(w[4] for w in writes)
        bare_loop = BareLoop(writes, [x * a.pages for x in pg.item_lens], [x * a.pages for x in dg.item_lens])
        probe, bare = [], []
        try:
            for _ in range(a.runs):  # interleaved, so that both see the same machine load
                res = run_probe(job, 60)
                assert not res.get("error"), res
                probe.append(res["seconds"])
                bare.append(bare_loop.once())
        finally:
            bare_loop.close()
    finally:
        agent.terminate()
        agent.wait(30)
    length = writes[0][4]
    pb, bb = total / statistics.median(probe), total / statistics.median(bare)
    print(json.dumps({"bytes": total, "writes": len(writes), "write_len": length, "runs": a.runs,
                      "probe_gbps": round(pb * 8 / 1e9, 3), "bare_gbps": round(bb * 8 / 1e9, 3), "ratio_probe_over_bare": round(pb / bb, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
