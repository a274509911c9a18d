"""``kvcheck fabric --local --start-etcd``: every node's worker on this host over loopback
(no root needed), a real etcd started by kvcheck, real kvcheck agents; JSON and JUnit."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("nixl_cu12._api", reason="nixl-cu12 is not installed (pip install nixl-cu12==1.5.1 --no-deps numpy)")

from tests.test_fabric_plan import _deployment, kvcheck  # noqa: E402

pytestmark = [pytest.mark.nixl, pytest.mark.timeout(120), pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")]


def test_local_run_json_and_junit(tmp_path):
    dep = _deployment(tmp_path, prefill=1, decode=2)
    proc = kvcheck("fabric", "-f", str(dep), "--local", "--start-etcd", "127.0.0.1:0", "--format", "json", "--timeout", "3",
                   "--output", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert proc.returncode == 0, (proc.stderr, report["findings"])
    cells = [c for row in report["matrix"] for c in row["cells"]]
    assert [(c["prefill"], c["decode"]) for c in cells] == [("t-prefill-0", "t-decode-0"), ("t-prefill-0", "t-decode-1")]
    assert all(c["reached"] and c["bytes_checked"] == 4 * 4 * 32768 and c["transport"] == ["tcp"] for c in cells)  # 4 regions x 4 pages
    assert all(n["guards_intact"] is True for n in report["nodes"])  # nothing written outside the regions
    assert {f["id"] for f in report["findings"]} == {"fabric-vram-untested", "fabric-gpu-topology-unchecked"}
    # The deployment asks for RDMA (rc) on a host without it: the UCX backend cannot start, named per node.
    dep2 = _deployment(tmp_path, prefill=1, decode=1, env={"UCX_TLS": "rc"})
    proc = kvcheck("fabric", "-f", str(dep2), "--local", "--start-etcd", "127.0.0.1:0", "--format", "junit", "--timeout", "3")
    assert proc.returncode == 1, proc.stderr
    suite = ET.fromstring(proc.stdout)
    failed = {tc.get("name"): tc.find("failure").get("type") for tc in suite.iter("testcase") if tc.find("failure") is not None}
    assert failed == {"t-prefill-0": "fabric-node-ucx", "t-decode-0": "fabric-node-ucx"}
    skipped = [tc.get("name") for tc in suite.iter("testcase") if tc.find("skipped") is not None]
    assert skipped == ["t-prefill-0 -> t-decode-0"]  # a pair never probed is never a pass
    assert int(suite.get("failures")) == 2 and int(suite.get("skipped")) == 1


def test_workers_started_elsewhere_join_by_run_id(tmp_path):
    """As with --emit: the workers run first (here: two processes on loopback), the
    coordinator only joins them through etcd by run id; they stop on their own after."""
    import os
    import subprocess
    import sys

    from kvcheck.fabric.launch import SmallEtcd
    from tests.test_fabric_plan import REPO

    etcd = SmallEtcd("127.0.0.1", 0)
    workers = []
    try:
        for node in ("t-prefill-0", "t-decode-0"):
            workers.append(subprocess.Popen([sys.executable, "-m", "kvcheck.fabric.worker", "--etcd", etcd.url, "--run", "ext1", "--node", node,
                                             "--listen-host", "127.0.0.1", "--ttl", "120", "--join-timeout", "60"], cwd=REPO,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ}))
        dep = _deployment(tmp_path, prefill=1, decode=1)
        proc = kvcheck("fabric", "-f", str(dep), "--etcd", etcd.url, "--run", "ext1", "--format", "json", "--timeout", "3", "--join-timeout", "60")
        report = json.loads(proc.stdout)
        assert proc.returncode == 0, (proc.stderr, report["findings"])
        assert report["matrix"][0]["cells"][0]["reached"] and report["probed_pairs"] == 1
        for w in workers:
            assert w.wait(timeout=15) == 0  # the coordinator's stop key ends them
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        etcd.close()


def test_tcp_fallback_where_rdma_is_asked(tmp_path):
    """UCX_TLS=rc,tcp on a host without RDMA: UCX starts, and silently moves KV over tcp
    (its own lanes say so): fabric-tcp-fallback on the pair."""
    dep = _deployment(tmp_path, prefill=1, decode=1, env={"UCX_TLS": "rc,tcp"})
    proc = kvcheck("fabric", "-f", str(dep), "--local", "--start-etcd", "127.0.0.1:0", "--format", "json", "--timeout", "3")
    report = json.loads(proc.stdout)
    cell = report["matrix"][0]["cells"][0]
    assert cell["reached"] and cell["transport"] == ["tcp"]
    errors = [(f["id"], f["pair"]) for f in report["findings"] if f["severity"] == "error"]
    assert errors == [("fabric-tcp-fallback", ["t-prefill-0", "t-decode-0"])]
    assert "UCX_TLS=rc,tcp" in next(f["message"] for f in report["findings"] if f["id"] == "fabric-tcp-fallback")
    assert proc.returncode == 1
