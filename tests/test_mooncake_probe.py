"""The Mooncake probe with Mooncake's own TransferEngine on loopback: a decode-role agent
(``kvcheck agent --backend mooncake``) in its own process, the probe's prefill engine in
another; the bytes are checked by digests the agent computes of its own regions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import REPO, run_cli, write_config

pytestmark = pytest.mark.mooncake

try:
    from kvcheck.mooncake.engine import load_engine

    load_engine()
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"Mooncake's transfer engine is not installed (scripts/setup-test-env.sh): {exc}", allow_module_level=True)

ENV = {**os.environ, "PYTHONPATH": str(REPO), "GLOG_minloglevel": "2"}


def _start_agent(cfg, *extra):
    proc = subprocess.Popen([sys.executable, "-m", "kvcheck", "agent", "--backend", "mooncake", "--role", "decode", "-c", str(cfg), "--ttl", "60",
                             "--pages", "3", *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV)
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("{"):
            break
    ready = json.loads(line)
    assert ready["event"] == "ready", ready
    return proc, ready


@pytest.fixture
def pair(tmp_path):
    args = {"tp-size": 2, "page-size": 16}
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {"disaggregation-mode": "prefill", **args})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", **args})
    return p, d


def test_probe_writes_and_verifies_over_tcp(pair, tmp_path):
    p, d = pair
    agent, ready = _start_agent(d, "--protocol", "tcp")
    try:
        assert ready["protocol"] == "tcp" and ready["regions"] == 64
        proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--kernel", "builtin", "--format", "json",
                       "--decode-agent", ready["listen"], "--probe", "--probe-pages", "3", "--timeout", "20", timeout=120)
        rep = json.loads(proc.stdout)
        ids = [f["id"] for f in rep["findings"]]
        assert proc.returncode == 0 and "probe-ok" in ids, rep["findings"]
        probe = rep["probe"]
        # 64 regions x 3 pages, one page item (16 tokens x 4 KV heads x 128 x 2 bytes) each
        assert probe["writes"] == 64 * 3 and probe["bytes"] == 64 * 3 * 16 * 4 * 128 * 2
        assert probe["mismatched"] == 0 and probe["guards_intact"] is True and probe["protocol"] == "tcp"
        # the prefill side asked for SGLang's default rdma: no RDMA device here, TCP is used
        assert "probe-tcp-fallback" in ids
    finally:
        agent.terminate()
        out, _ = agent.communicate(timeout=30)
    stopped = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    assert stopped["event"] == "stopped" and stopped["guards_intact"] is True


def test_probe_refuses_an_agent_of_another_geometry(pair, tmp_path):
    p, _ = pair
    other = write_config(tmp_path, "decode4", "llama-3.1-8b", {"disaggregation-mode": "decode", "tp-size": 4, "page-size": 16})
    agent, ready = _start_agent(other, "--protocol", "tcp")
    try:
        d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", "tp-size": 2, "page-size": 16})
        proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--kernel", "builtin", "--format", "json",
                       "--decode-agent", ready["listen"], "--probe", "--timeout", "10", timeout=120)
        rep = json.loads(proc.stdout)
        f = next(f for f in rep["findings"] if f["id"] == "agent-geometry")
        assert "item length 8192" in f["message"] and "item length 16384" in f["message"]
        assert "probe" not in rep  # nothing was written
    finally:
        agent.terminate()
        agent.communicate(timeout=30)


def test_probe_unreachable_agent_has_a_deadline(pair):
    p, d = pair
    t0 = time.monotonic()
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--kernel", "builtin", "--format", "json",
                   "--decode-agent", "127.0.0.1:9", "--probe", "--timeout", "2", timeout=60)
    rep = json.loads(proc.stdout)
    assert "probe-unreachable" in [f["id"] for f in rep["findings"]] and proc.returncode == 4
    assert time.monotonic() - t0 < 40


def test_probe_through_an_http_metadata_server(pair, tmp_path):
    """The same probe with Mooncake's own HTTP metadata server (mooncake.http_metadata_server)
    instead of the P2P handshake: both engines publish their segments there."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([sys.executable, "-m", "mooncake.http_metadata_server", "--port", str(port), "--host", "127.0.0.1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    p, d = pair
    try:
        import httpx

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/metadata?key=kvcheck", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        agent, ready = _start_agent(d, "--protocol", "tcp", "--metadata-server", f"http://127.0.0.1:{port}/metadata")
        try:
            proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--kernel", "builtin", "--format", "json",
                           "--decode-agent", ready["listen"], "--probe", "--probe-pages", "2", "--timeout", "20", timeout=120)
            rep = json.loads(proc.stdout)
            assert "probe-ok" in [f["id"] for f in rep["findings"]], rep["findings"]
            assert rep["probe"]["metadata"].startswith("http://") and rep["probe"]["mismatched"] == 0
        finally:
            agent.terminate()
            agent.communicate(timeout=30)
    finally:
        srv.kill()
        srv.wait()


def test_probe_through_an_etcd_metadata_server(pair, tmp_path):
    """The same probe with a real etcd (Debian's etcd-server, started here on loopback with
    a deadline) as Mooncake's metadata server (``etcd://HOST:PORT``): both engines publish
    their segment descriptors in etcd and the probe's engine opens the agent's segment by
    name from there; the bytes are checked by the agent's digests."""
    import shutil

    if shutil.which("etcd") is None:
        pytest.skip("etcd-server is not installed (scripts/setup-test-env.sh)")
    from nixl_helpers import Etcd

    etcd = Etcd()
    p, d = pair
    try:
        meta = f"etcd://127.0.0.1:{etcd.port}"
        agent, ready = _start_agent(d, "--protocol", "tcp", "--metadata-server", meta)
        try:
            assert ready["regions"] == 64
            proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--kernel", "builtin", "--format", "json",
                           "--decode-agent", ready["listen"], "--probe", "--probe-pages", "2", "--timeout", "20", timeout=120)
            rep = json.loads(proc.stdout)
            assert "probe-ok" in [f["id"] for f in rep["findings"]], rep["findings"]
            probe = rep["probe"]
            assert probe["metadata"] == meta and probe["writes"] == 64 * 2
            assert probe["mismatched"] == 0 and probe["guards_intact"] is True
            # the segment was published in etcd by Mooncake itself (its keys are under mooncake/)
            import base64

            import httpx

            keys = httpx.post(f"{etcd.url}/v3/kv/range", json={"key": base64.b64encode(b"\0").decode(), "range_end": base64.b64encode(b"\0").decode(),
                                                               "keys_only": True}, timeout=5).json().get("kvs", [])
            names = [base64.b64decode(k["key"]).decode(errors="replace") for k in keys]
            assert any("mooncake" in n for n in names), names
        finally:
            agent.terminate()
            agent.communicate(timeout=30)
    finally:
        etcd.close()


@pytest.mark.parametrize(
    "extra, field",
    [
        (("--name", "kvcheck-a/b"), "--name"),
        (("--name", "kvcheck-" + "x" * 200), "--name"),
        (("--max-memory", "0"), "--max-memory"),
        (("--max-memory", "nan"), "--max-memory"),
        (("--pages", "65537"), "--pages"),
    ],
)
def test_mooncake_agent_refuses_what_the_nixl_agent_refuses(pair, extra, field):
    """Both agents take their arguments through one check (``nixl.commands.check_agent_args``):
    a name that is no kvcheck agent's or would split an etcd key, a memory cap that is not a
    finite number of GiB in (0, 4096], and pages past the Mooncake agent's cap are exit 2
    before anything is allocated or registered."""
    _, d = pair
    proc = subprocess.run(
        [sys.executable, "-m", "kvcheck", "agent", "--backend", "mooncake", "--role", "decode", "-c", str(d),
         "--ttl", "5", *extra],
        capture_output=True, text=True, env=ENV, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert field in proc.stderr and "Traceback" not in proc.stderr
