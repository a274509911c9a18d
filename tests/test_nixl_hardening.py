"""The probe cannot corrupt, deadlines hold, statuses match the fault (issue 10, NIXL part).

Real kvcheck agents in child processes on 127.0.0.1, a real etcd, and loopback servers
that stall or trickle. Timing is asserted only as "ends within deadline + bound", with a
bound (``SLACK``) generous for a busy 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import time

import pytest

pytest.importorskip("nixl_cu12._api", reason="nixl-cu12 is not installed (pip install nixl-cu12==1.5.1 --no-deps numpy)")

from tests.nixl_helpers import UNIFORM, AgentProc, Etcd, StallServer, etcd_put, free_port, run_kvcheck, write_pair  # noqa: E402

pytestmark = [pytest.mark.nixl, pytest.mark.timeout(180)]

SLACK = 8.0  # seconds our own code may add past a deadline (process start-up included) on a loaded 2-core host


@pytest.fixture
def uniform(tmp_path):
    (tmp_path / "u").mkdir()
    return write_pair(tmp_path / "u", *UNIFORM)


@pytest.fixture
def etcd():
    try:
        server = Etcd()
    except FileNotFoundError:
        pytest.skip("etcd binary not found")
    yield server
    server.close()


def preflight(pair, *extra, timeout=120):
    return run_kvcheck("preflight", "--prefill", str(pair[0]), "--decode", str(pair[1]), "--format", "json", "--kernel", "builtin", *extra, timeout=timeout)


def ids(report):
    return [f["id"] for f in report["findings"]]


def probe_job(pair, target, *, timeout=3.0, pages=2, hold=()):
    from kvcheck.nixl.probe import build_job
    from kvcheck.preflight import run_preflight
    from kvcheck.sglang.geometry import derive_geometry
    from kvcheck.sources import load_side

    p, d = load_side(str(pair[0]), "prefill", sglang_version="0.5.23"), load_side(str(pair[1]), "decode", sglang_version="0.5.23")
    job = build_job(run_preflight(p, d).plan, derive_geometry(p), derive_geometry(d), target, pages=pages, timeout=timeout)
    job["hold"] = list(hold)
    return job


# ---------------------------------------------------------------------------------
# 1. The probe cannot write outside memory a kvcheck agent allocated for it
# ---------------------------------------------------------------------------------

def _doctor(blob: bytes, which: str, agent: AgentProc) -> bytes:
    """Patch one region address of ``blob`` so it points ``which`` way."""
    from kvcheck.nixl.blob import parse_metadata

    from kvcheck.nixl.agent import CONFIRM_DEV_ID

    meta = parse_metadata(blob)
    regs = sorted((r for r in meta.regions("DRAM") if r.dev_id != CONFIRM_DEV_ID), key=lambda r: r.addr)
    (tail_guard, tail_len) = agent.info["guards"][1]
    if which == "outside":  # entirely in the guard zone after the arena
        victim, new_addr = regs[5], tail_guard + 4096
    elif which == "across":  # the last region shifted half its length: crosses the arena's end
        victim = regs[-1]
        new_addr = victim.addr + victim.length // 2
    else:  # into the agent's heap
        victim, new_addr = regs[0], agent.heap()[0] + 0x1000
    old = struct.pack("<QQQ", victim.addr, victim.length, victim.dev_id)
    assert blob.count(old) == 1
    return blob.replace(old, struct.pack("<QQQ", new_addr, victim.length, victim.dev_id))


@pytest.mark.etcd
@pytest.mark.parametrize("which", ["outside", "across", "heap"])
def test_doctored_etcd_blob_is_refused_and_agent_memory_unchanged(uniform, etcd, which, tmp_path):
    agent = AgentProc("decode", uniform[1], "--etcd", etcd.url)
    try:
        host = etcd.url.removeprefix("http://")
        target = f"etcd://{host}/{agent.info['name']}"
        saved = tmp_path / "blob.bin"
        assert run_kvcheck("inspect", target, "--save", str(saved)).returncode == 0
        doctored = _doctor(saved.read_bytes(), which, agent)
        from kvcheck.nixl.transport import EtcdGateway

        etcd_put(etcd.url, EtcdGateway(etcd.url).key(agent.info["name"]), doctored)  # anyone who reaches etcd can
        guards = [(a, n, agent.read_mem(a, n)) for a, n in agent.info["guards"]]
        assert all(g == bytes([0xA5]) * n for _, n, g in guards)
        heap_lo, _ = agent.heap()
        heap_before = agent.read_mem(heap_lo + 0x1000, 4096) if which == "heap" else None

        proc = preflight(uniform, "--decode-agent", target, "--probe", "--timeout", "5")
        report = json.loads(proc.stdout)
        assert proc.returncode == 1, proc.stderr
        assert "probe-unconfirmed-region" in ids(report), report["findings"]
        assert report["probe"]["segments"] == [] and "write segment 0" not in report["probe"]["steps"]
        assert agent.proc.poll() is None  # alive
        for a, n, before in guards:
            assert agent.read_mem(a, n) == before  # nothing outside the regions changed
        if which == "heap":
            # the heap moves on its own; the agent still answers and nothing was written
            assert heap_before is not None and run_kvcheck("inspect", agent.listen).returncode == 0
    finally:
        lines = agent.stop()
    assert not [x for x in lines if x["event"] == "notification"]
    assert [x["guards_intact"] for x in lines if x["event"] == "stopped"] == [True]


class FakeConfirmListener:
    """A listener that is not the agent: it serves ``blob`` and answers every confirmation
    with ``answer`` (nonce replaced by the one asked), i.e. it lies consistently."""

    def __init__(self, blob: bytes, answer: dict):
        import hashlib
        import socket
        import threading

        self.blob, self.answer = blob, {**answer, "blob_sha256": hashlib.sha256(blob).hexdigest()}
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from kvcheck.nixl.agent import _recv

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                deadline = time.monotonic() + 5
                while True:
                    head = _recv(conn, 8, deadline)
                    if head is None:
                        break
                    msg = _recv(conn, struct.unpack("<Q", head)[0], deadline)
                    if msg is None:
                        break
                    if msg.startswith(b"NIXLCOMM:SEND"):
                        out = b"NIXLCOMM:LOAD" + self.blob
                    else:
                        out = b"KVCHECK:REGIONS" + json.dumps({**self.answer, "nonce": msg[15:].hex()}).encode()
                    conn.sendall(struct.pack("<Q", len(out)) + out)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def test_a_listener_that_is_not_the_agent_cannot_confirm(uniform):
    """A consistent liar (doctored blob + matching region list) is caught by the record
    the probe READs back from the NIXL agent the blob names."""
    from kvcheck.nixl.agent import CONFIRM_DEV_ID
    from kvcheck.nixl.blob import parse_metadata
    from kvcheck.nixl.transport import confirm_agent, fetch_listener_blob

    agent = AgentProc("decode", uniform[1])
    try:
        host, port = agent.listen.rsplit(":", 1)
        blob = fetch_listener_blob(host, int(port))
        real = confirm_agent(host, int(port), 5).answer
        victim = sorted((r for r in parse_metadata(blob).regions("DRAM") if r.dev_id != CONFIRM_DEV_ID), key=lambda r: r.addr)[5]
        new_addr = agent.info["guards"][1][0] + 4096
        doctored = blob.replace(struct.pack("<QQQ", victim.addr, victim.length, victim.dev_id),
                                struct.pack("<QQQ", new_addr, victim.length, victim.dev_id))
        regions = [dict(r, addr=new_addr) if r["addr"] == victim.addr else r for r in real["regions"]]
        fake = FakeConfirmListener(doctored, {**real, "regions": regions})
        guards = [(a, n, agent.read_mem(a, n)) for a, n in agent.info["guards"]]
        try:
            proc = preflight(uniform, "--decode-agent", f"127.0.0.1:{fake.port}", "--probe", "--timeout", "5")
        finally:
            fake.close()
        report = json.loads(proc.stdout)
        assert proc.returncode == 1, proc.stderr
        assert "probe-unconfirmed" in ids(report), report["findings"]
        assert "not the agent the metadata names" in " ".join(f["message"] for f in report["findings"])
        assert report["probe"]["segments"] == []
        assert agent.proc.poll() is None
        for a, n, before in guards:
            assert agent.read_mem(a, n) == before
    finally:
        lines = agent.stop()
    assert not [x for x in lines if x["event"] == "notification"]
    assert [x["guards_intact"] for x in lines if x["event"] == "stopped"] == [True]


def test_probe_refuses_a_saved_blob_file(uniform, tmp_path):
    agent = AgentProc("decode", uniform[1], "--listen", "127.0.0.1:0")
    try:
        saved = tmp_path / "blob.bin"
        assert run_kvcheck("inspect", agent.listen, "--save", str(saved)).returncode == 0
        proc = preflight(uniform, "--decode-agent", str(saved), "--probe", "--timeout", "5")
        report = json.loads(proc.stdout)
    finally:
        lines = agent.stop()
    assert proc.returncode == 1
    assert "probe-unconfirmed" in ids(report) and report["probe"]["segments"] == []
    assert not [x for x in lines if x["event"] == "notification"]


@pytest.mark.etcd
def test_probe_through_etcd_confirms_and_passes(uniform, etcd):
    agent = AgentProc("decode", uniform[1], "--etcd", etcd.url)
    try:
        host = etcd.url.removeprefix("http://")
        proc = preflight(uniform, "--decode-agent", f"etcd://{host}/{agent.info['name']}", "--probe", "--timeout", "5")
        report = json.loads(proc.stdout)
    finally:
        lines = agent.stop()
    assert proc.returncode == 0 and report["probe"]["ok"], report
    assert [x["message"] for x in lines if x["event"] == "notification"] == [report["probe"]["segments"][0]["notification"]]
    assert [x["guards_intact"] for x in lines if x["event"] == "stopped"] == [True]


def test_confirmation_is_nonce_bound(uniform):
    from kvcheck.nixl.transport import confirm_agent

    agent = AgentProc("decode", uniform[1])
    try:
        host, port = agent.listen.rsplit(":", 1)
        a = confirm_agent(host, int(port), 5, with_blob=True, nonce=b"\x01" * 16)
        b = confirm_agent(host, int(port), 5)
    finally:
        agent.stop()
    assert a.name == agent.info["name"] == b.name and a.pid == agent.info["pid"]
    assert len(a.regions) == 64 and all(r.kind == "DRAM" and r.length == 4 * 16384 for r in a.regions)
    assert a.record is not None and a.record != b.record  # one record slot per nonce
    assert a.blob_sha256 == b.blob_sha256


# ---------------------------------------------------------------------------------
# 2. Deadlines that hold
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["stall", "trickle"])
def test_inspect_etcd_deadline_holds(mode):
    # trickle: a valid HTTP head, then a body one byte at a time
    payload = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n" + b"1\r\n \r\n" * 1000
    server = StallServer(mode, payload=payload, every=0.3)
    try:
        t0 = time.monotonic()
        proc = run_kvcheck("inspect", f"etcd://127.0.0.1:{server.port}", "--timeout", "3")
        took = time.monotonic() - t0
    finally:
        server.close()
    assert proc.returncode == 3, proc.stderr
    assert "deadline" in proc.stderr and "Traceback" not in proc.stderr
    assert took < 3 + SLACK


@pytest.mark.parametrize("mode", ["stall", "trickle"])
def test_inspect_listener_deadline_holds(mode):
    # trickle: a NIXL frame header announcing 1 MB, then one byte at a time
    server = StallServer(mode, payload=struct.pack("<Q", 1 << 20) + b"NIXLCOMM:LOAD", every=0.3)
    try:
        t0 = time.monotonic()
        proc = run_kvcheck("inspect", f"127.0.0.1:{server.port}", "--timeout", "3")
        took = time.monotonic() - t0
    finally:
        server.close()
    assert proc.returncode == 3, proc.stderr
    assert took < 3 + SLACK


def test_preflight_probe_through_stalled_etcd_ends_in_time(uniform):
    server = StallServer("stall")
    try:
        t0 = time.monotonic()
        proc = preflight(uniform, "--decode-agent", f"etcd://127.0.0.1:{server.port}/kvcheck-decode-x-1", "--probe", "--timeout", "3")
        took = time.monotonic() - t0
    finally:
        server.close()
    assert proc.returncode == 3 and "deadline" in proc.stderr
    assert took < 3 + SLACK


def test_etcd_gateway_overall_deadline_not_per_read():
    from kvcheck.errors import UnreachableError
    from kvcheck.nixl.transport import EtcdGateway

    payload = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b" " * 100000
    server = StallServer("trickle", payload=payload, every=0.05)  # each read well inside any per-read timeout
    try:
        t0 = time.monotonic()
        with pytest.raises(UnreachableError, match="deadline"):
            EtcdGateway(f"http://127.0.0.1:{server.port}", timeout=2).list_agents()
        assert time.monotonic() - t0 < 2 + SLACK
    finally:
        server.close()


# ---------------------------------------------------------------------------------
# 3. Statuses and findings that match the fault
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("at", ["load metadata", "write segment 0", "read back segment 0"])
def test_peer_killed_mid_probe_is_peer_lost(uniform, at):
    from kvcheck.nixl.probe import probe_budget, run_probe

    agent = AgentProc("decode", uniform[1])
    job = probe_job(uniform, agent.listen, hold=[at])

    def on_event(ev):
        if ev.get("type") == "hold":
            agent.kill()

    try:
        t0 = time.monotonic()
        result = run_probe(job, on_event=on_event)
        took = time.monotonic() - t0
    finally:
        agent.kill()
    fids = [f.id for f in result.findings]
    assert not result.ok
    assert fids == ["probe-peer-lost"], result.findings
    assert "backend" not in result.findings[0].message
    assert took < probe_budget(job) + SLACK


def test_peer_restarted_mid_probe_is_peer_restarted(uniform):
    from kvcheck.nixl.probe import run_probe

    port = free_port()
    args = ("--listen", f"127.0.0.1:{port}", "--name", "kvcheck-decode-fixed")
    agents = [AgentProc("decode", uniform[1], *args)]
    job = probe_job(uniform, agents[0].listen, hold=["write segment 0"])

    def on_event(ev):
        if ev.get("type") == "hold":
            agents[0].kill()
            agents.append(AgentProc("decode", uniform[1], *args))  # same name, same port, new metadata

    try:
        result = run_probe(job, on_event=on_event)
    finally:
        for a in agents:
            a.kill()
    assert len(agents) == 2 and agents[1].info["name"] == agents[0].info["name"] == "kvcheck-decode-fixed"
    assert [f.id for f in result.findings] == ["probe-peer-restarted"], result.findings


@pytest.mark.parametrize("at", [None, "load metadata", "write segment 0"])
def test_frozen_peer_gives_one_status(uniform, at, monkeypatch):
    """A frozen peer is exit 3 (live source not reached in time), before or mid-probe."""
    from kvcheck.errors import UnreachableError

    agent = AgentProc("decode", uniform[1])
    try:
        if at is None:
            os.kill(agent.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            proc = preflight(uniform, "--decode-agent", agent.listen, "--probe", "--timeout", "3")
            assert proc.returncode == 3, proc.stderr
            assert time.monotonic() - t0 < 3 + SLACK
            return
        import kvcheck.nixl.probe as probe_mod
        from kvcheck.nixl.commands import augment_preflight
        from kvcheck.preflight import run_preflight
        from kvcheck.sources import load_side

        real = probe_mod.run_probe

        def frozen_at(job, on_event=None, python=None):
            job["hold"] = [at]

            def ev(e):
                if e.get("type") == "hold":
                    os.kill(agent.pid, signal.SIGSTOP)
            return real(job, on_event=ev)

        monkeypatch.setattr(probe_mod, "run_probe", frozen_at)
        p, d = load_side(str(uniform[0]), "prefill", sglang_version="0.5.23"), load_side(str(uniform[1]), "decode", sglang_version="0.5.23")
        report = run_preflight(p, d)
        with pytest.raises(UnreachableError, match="probe-timeout") as err:
            augment_preflight(report, p, d, prefill_agent=None, decode_agent=agent.listen, probe=True, timeout=2, pages=2, show_progress=False)
        assert err.value.exit_code == 3
    finally:
        agent.kill()


@pytest.mark.parametrize("ttl", ["nan", "inf", "1e300", "-1", "0", "604801", "ten"])
def test_agent_ttl_must_be_finite_and_bounded(uniform, ttl):
    proc = run_kvcheck("agent", "--role", "decode", "--config", str(uniform[1]), "--ttl", ttl, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--ttl" in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""


def test_agent_memory_cap_refused_before_allocating(uniform):
    # llama-3.1-8b TP2: 64 regions x 16 KiB per page; 8192 pages = 8 GiB > the 4 GiB default cap
    proc = run_kvcheck("agent", "--role", "decode", "--config", str(uniform[1]), "--ttl", "5", "--pages", "8192")
    assert proc.returncode == 2 and "memory cap" in proc.stderr and proc.stdout == ""
    assert "8589934592 bytes" in proc.stderr
    small = run_kvcheck("agent", "--role", "decode", "--config", str(uniform[1]), "--ttl", "5", "--max-memory", "0.001")
    assert small.returncode == 2 and "memory cap" in small.stderr


def test_agent_idles_without_spinning_and_stdout_is_json_only(uniform):
    agent = AgentProc("decode", uniform[1], env={"NIXL_LOG_LEVEL": "INFO"})
    try:
        time.sleep(0.5)
        c0, t0 = agent.cpu_seconds(), time.monotonic()
        time.sleep(3)
        share = (agent.cpu_seconds() - c0) / (time.monotonic() - t0)
    finally:
        lines = agent.stop()
    assert share < 0.2, f"idle agent used {share:.0%} of a core"
    # every stdout line was JSON (stop() parses them all), NIXL's own log went to stderr
    assert [x["event"] for x in lines] == ["stopped"]
    assert "Initialized NIXL agent" in agent.stderr()


def test_gpu_detection_does_not_import_torch_without_a_driver():
    if os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia"):
        pytest.skip("this host has an NVIDIA driver")
    import subprocess
    import sys

    code = "import sys; from kvcheck.nixl.agent import gpu_allocator; assert gpu_allocator() is None; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
