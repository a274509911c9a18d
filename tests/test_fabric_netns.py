"""kvcheck fabric on real hosts: network namespaces on one bridge, UCX over TCP, real
kvcheck agents (NIXL), a real etcd on the bridge. Run as root; skipped otherwise.

Every test asserts what the runtime side reports: the probes' own bytes, the lanes UCX
logged, the UCX backend's own refusal, the agents' heartbeats."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
import yaml

pytest.importorskip("nixl_cu12._api", reason="nixl-cu12 is not installed (pip install nixl-cu12==1.5.1 --no-deps numpy)")

from tests.fabric_lab import Lab, lab_unavailable  # noqa: E402

_why = lab_unavailable()
pytestmark = [pytest.mark.nixl, pytest.mark.timeout(180), pytest.mark.skipif(_why is not None, reason=f"network namespaces: {_why}")]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.path.join(REPO, "configs", "models", "llama-3.1-8b", "config.json")


def small_model(tmp) -> str:
    """A 4-layer Llama config (8 KV heads, head dim 128): 8 KV regions of 32 KiB pages."""
    cfg = json.load(open(LLAMA))
    cfg["num_hidden_layers"] = 4
    d = tmp / "tiny-llama"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def deployment(tmp, model: str, prefill: int, decode: int, env: dict) -> str:
    """A Kubernetes manifest: ``prefill`` prefill replicas and ``decode`` decode replicas, TP 1, NIXL."""
    docs = []
    for role, n in (("prefill", prefill), ("decode", decode)):
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"tiny-{role}"},
                     "spec": {"replicas": n, "selector": {"matchLabels": {"r": role}}, "template": {"metadata": {"labels": {"r": role}}, "spec": {
                         "hostNetwork": True, "nodeSelector": {"fabric/pool": role},
                         "containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.23-cu129", "command": ["python3", "-m", "sglang.launch_server"],
                                         "args": [f"--model-path={model}", f"--disaggregation-mode={role}", "--disaggregation-transfer-backend=nixl",
                                                  "--tp-size=1", "--page-size=16"],
                                         "env": [{"name": k, "value": v} for k, v in env.items()],
                                         "resources": {"limits": {"nvidia.com/gpu": 1, "rdma/ib": 1}}}]}}}})
    path = tmp / f"tiny-{prefill}p{decode}d.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


class Cluster:
    """``n`` namespaced hosts + etcd on the bridge."""

    def __init__(self, n: int):
        from tests.nixl_helpers import free_port

        self.lab = Lab(n)
        self.etcd_proc = None
        try:
            self.start_etcd(free_port())
        except Exception:
            self.lab.close()
            raise

    def start_etcd(self, port: int) -> None:
        from kvcheck.fabric.launch import SmallEtcd

        self.etcd = SmallEtcd(self.lab.gateway, port)
        self.url = self.etcd.url

    def hosts(self, names: list[str], env: dict | None = None, prefix: dict | None = None) -> dict:
        out = {}
        for i, name in enumerate(names):
            out[name] = {"prefix": (prefix or {}).get(name, self.lab.prefix(i)), "listen_host": self.lab.ips[i], "env": (env or {}).get(name, {})}
        return out

    def close(self) -> None:
        try:
            self.etcd.close()
        finally:
            self.lab.close()


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(8)
    yield c
    c.close()


ENV = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}
# Healthy pairs on a shared 2-core CI machine vary several-fold (CPU-bound TCP over veth);
# the injected faults are two to three orders of magnitude below them.
MIN_FRACTION = 0.1


def run(cluster, tmp, prefill, decode, *, env=None, node_env=None, prefix=None, on_event=None, **opts):
    from kvcheck.fabric.coordinator import FabricOptions, run_fabric
    from kvcheck.fabric.launch import Launcher
    from kvcheck.fabric.report import build_report
    from kvcheck.fabric.topology import build_plan
    from kvcheck.sources.deployments import read_deployments

    dep = deployment(tmp, small_model(tmp), prefill, decode, env or ENV)
    plan = build_plan(read_deployments([dep]), pages=opts.pop("pages", 4), timeout=opts.get("timeout", 3.0))
    names = plan.prefill_nodes + plan.decode_nodes
    launcher = Launcher(cluster.hosts(names, node_env, prefix))
    o = FabricOptions(etcd=cluster.url, join_timeout=opts.pop("join_timeout", 30), timeout=opts.pop("timeout", 3.0), **opts)
    result = run_fabric(plan, o, launcher, on_event=on_event and (lambda k, d: on_event(k, d, launcher)))
    report = build_report(result, plan, min_fraction=MIN_FRACTION)
    return plan, result, report, names


def pair_findings(report):
    return sorted((f["id"], tuple(f["pair"])) for f in report["findings"] if f["pair"] and f["severity"] != "info")


def node_findings(report):
    return sorted((f["id"], f["node"]) for f in report["findings"] if f["node"] and f["severity"] != "info")


def test_matrix_2x4_every_required_pair(cluster, tmp_path):
    """The CLI path: kvcheck fabric -f DEPLOYMENT --hosts FILE --etcd URL --format json."""
    import subprocess
    import sys

    dep = deployment(tmp_path, small_model(tmp_path), 2, 4, ENV)
    names = ["tiny-prefill-0", "tiny-prefill-1", "tiny-decode-0", "tiny-decode-1", "tiny-decode-2", "tiny-decode-3"]
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(cluster.hosts(names)))
    proc = subprocess.run([sys.executable, "-m", "kvcheck", "fabric", "-f", dep, "--hosts", str(tmp_path / "hosts.yaml"), "--etcd", cluster.url,
                           "--format", "json", "--timeout", "3", "--min-fraction", str(MIN_FRACTION), "--join-timeout", "30"],
                          capture_output=True, text=True, cwd=REPO, timeout=150)
    report = json.loads(proc.stdout)
    assert report["required_pairs"] == 8 and report["planned_rounds"] == 4  # max(P, D) rounds
    for r in report["rounds"]:  # no node in two probes at once
        assert len({p for p, _ in r["pairs"]}) == len({d for _, d in r["pairs"]}) == len(r["pairs"])
    cells = [c for row in report["matrix"] for c in row["cells"]]
    assert len(cells) == 8 and all(c["reached"] and c["status"] == "ok" for c in cells), report["findings"]
    assert all(c["bytes_checked"] == 8 * 4 * 32768 for c in cells)  # 8 regions x 4 pages x 32 KiB, read back and compared
    assert all(c["lanes"] == ["tcp/eth0"] and c["transport"] == ["tcp"] for c in cells)  # the lanes UCX logged for the endpoint
    assert all(c["asked_devices"] == ["eth0"] and c["asked_source"] == "UCX_NET_DEVICES" for c in cells)
    assert all(c["bandwidth_Bps"] > 0 and c["latency_s"] > 0 for c in cells)
    assert pair_findings(report) == [] and node_findings(report) == [], [f["message"] for f in report["findings"] if f["pair"] or f["node"]]
    assert report["verdict"] == "pass" and proc.returncode == 0, proc.stderr
    assert {n["name"]: (n["status"], n["guards_intact"]) for n in report["nodes"]} == {n: ("ready", True) for n in names}


def test_faults_name_exactly_their_pair_or_node(cluster, tmp_path):
    """A slow pair (tc netem delay where the kernel has sch_netem, else an HTB rate limit),
    a rate-limited pair (tc HTB), a lossy pair (iptables statistic match in the receiver), a dropped pair (iptables), one node with UCX_NET_DEVICES naming no interface, one with UCX_TLS=rc."""
    from tests.fabric_lab import has_netem

    lab = cluster.lab
    # nodes: 0 p0, 1 p1, 2.. d0..d5
    if has_netem():
        lab.shape(0, 2, netem="delay 60ms")  # p0 -> d0
    else:
        lab.shape(0, 2, rate="4mbit")
    lab.shape(1, 3, rate="8mbit")          # p1 -> d1
    lab.loss(0, 6, 0.1)                    # p0 -> d4: 10% of the packets lost on the way
    lab.drop(0, 4)                          # p0 x d2
    try:
        node_env = {"tiny-decode-3": {"UCX_NET_DEVICES": "eth9"}, "tiny-decode-5": {"UCX_TLS": "rc"}}
        plan, result, report, names = run(cluster, tmp_path, 2, 6, node_env=node_env, timeout=4.0)
    finally:
        lab.unshape(0)
        lab.unshape(1)
        lab.undrop(0, 4)
        lab.undrop(6, 0)
    nodes = node_findings(report)
    assert {n for _, n in nodes} == {"tiny-decode-3", "tiny-decode-5"}, nodes  # exactly the misconfigured nodes
    assert [x for x in nodes if x[0] == "fabric-node-ucx"] == [("fabric-node-ucx", "tiny-decode-3"), ("fabric-node-ucx", "tiny-decode-5")]
    found = pair_findings(report)
    assert ("fabric-unreachable", ("tiny-prefill-0", "tiny-decode-2")) in found
    lossy = {p for fid, p in found if fid in ("fabric-lossy-link", "fabric-slow-link", "fabric-unreachable")}
    assert ("tiny-prefill-0", "tiny-decode-4") in lossy, {p: [a.get("counters") for a in r.attempts] for p, r in result.pairs.items()}  # TCP retransmissions seen by the prefill node
    slow = {p for fid, p in found if fid == "fabric-slow-link"}
    assert {("tiny-prefill-0", "tiny-decode-0"), ("tiny-prefill-1", "tiny-decode-1")} <= slow, report["findings"]
    named = {p for _, p in found}
    healthy = {("tiny-prefill-1", "tiny-decode-0"), ("tiny-prefill-0", "tiny-decode-1"), ("tiny-prefill-1", "tiny-decode-2"), ("tiny-prefill-1", "tiny-decode-4")}
    assert not named & healthy, found
    assert named <= {("tiny-prefill-0", "tiny-decode-0"), ("tiny-prefill-1", "tiny-decode-1"), ("tiny-prefill-0", "tiny-decode-2"), ("tiny-prefill-0", "tiny-decode-4")}
    ucx = [f for f in report["findings"] if f["id"] == "fabric-node-ucx"]
    assert "UCX_NET_DEVICES=eth9" in ucx[0]["message"] and "UCX_TLS=rc" in ucx[1]["message"]
    assert report["verdict"] == "fail" and report["exit_code"] == 1


def test_frozen_dead_and_missing_nodes_end_within_the_deadline(cluster, tmp_path):
    """A node whose worker never starts, a decode agent frozen (SIGSTOP) in the first
    round, a prefill agent killed (SIGKILL) mid-round: each named, the run ends in time."""
    seen = {}

    def on_event(kind, data, launcher):
        seen["launcher"] = launcher
        if kind == "round" and data["kind"] == "probe" and data["index"] == 0:
            os.kill(launcher.procs["tiny-decode-0"].pid, signal.SIGSTOP)
            threading.Timer(0.3, lambda: os.kill(launcher.procs["tiny-prefill-1"].pid, signal.SIGKILL)).start()

    silent = ["sh", "-c", "exec sleep 300", "--"]  # never runs the worker: the node never joins
    t0 = time.monotonic()
    plan, result, report, names = run(cluster, tmp_path, 2, 4, prefix={"tiny-decode-3": [*cluster.lab.prefix(5), *silent]},
                                      on_event=on_event, join_timeout=8, lost_after=3.0, deadline=120)
    took = time.monotonic() - t0
    nodes = node_findings(report)
    assert ("fabric-node-missing", "tiny-decode-3") in nodes
    assert ("fabric-agent-lost", "tiny-decode-0") in nodes and ("fabric-agent-lost", "tiny-prefill-1") in nodes, nodes
    assert {n for _, n in nodes} == {"tiny-decode-0", "tiny-decode-3", "tiny-prefill-1"}
    assert pair_findings(report) == [], pair_findings(report)  # said once, on the node
    ok = {(c["prefill"], c["decode"]) for row in report["matrix"] for c in row["cells"] if c.get("reached")}
    assert {("tiny-prefill-0", "tiny-decode-1"), ("tiny-prefill-0", "tiny-decode-2")} <= ok
    assert report["exit_code"] == 1
    assert result.seconds < 120 and took < 120  # the run's own deadline holds
    assert all(p.poll() is not None for p in seen["launcher"].procs.values())  # every worker ended, the frozen one too


def test_etcd_going_away_ends_the_run(cluster, tmp_path):
    from kvcheck.fabric.launch import SmallEtcd
    from tests.nixl_helpers import free_port

    own = SmallEtcd(cluster.lab.gateway, free_port())
    saved = cluster.url
    cluster.url = own.url

    seen = {}

    def on_event(kind, data, launcher):
        seen["launcher"] = launcher
        if kind == "round" and data["index"] == 1:
            own.proc.kill()

    try:
        t0 = time.monotonic()
        plan, result, report, names = run(cluster, tmp_path, 2, 4, on_event=on_event, deadline=60)
        took = time.monotonic() - t0
    finally:
        cluster.url = saved
        own.close()
    assert result.etcd_lost and report["exit_code"] == 3
    assert [f["id"] for f in report["findings"] if f["severity"] == "error"] == ["fabric-etcd-lost"]
    assert took < 60
    assert all(p.poll() is not None for p in seen["launcher"].procs.values())  # every worker ended


def test_listener_reachable_but_ucx_blocked_names_the_pair(cluster, tmp_path):
    """Only the decode agent's listener port gets through: confirmation works, then a
    NIXL/UCX call never returns. The prefill worker ends the probe at its budget, names
    the step, replaces its wedged agent, and the pair (not the node) is named."""
    import subprocess

    from kvcheck.fabric import coordinator as co

    lab = cluster.lab
    join = co.Coordinator._join

    def join_then_block(self):
        join(self)
        port = self.result.nodes["tiny-decode-0"]["listen"].rsplit(":", 1)[1]
        for rule in (["-p", "tcp", "--dport", port, "-j", "ACCEPT"], ["-j", "DROP"]):
            subprocess.run([*lab.prefix(0), "iptables", "-A", "OUTPUT", "-d", lab.ips[1], *rule], check=True)

    co.Coordinator._join = join_then_block
    try:
        plan, result, report, names = run(cluster, tmp_path, 1, 1, timeout=1.0, retests=0)
    finally:
        co.Coordinator._join = join
        lab.undrop(0, 1)
    assert [(f["id"], f["pair"]) for f in report["findings"] if f["severity"] == "error"] == [("fabric-unreachable", ["tiny-prefill-0", "tiny-decode-0"])]
    assert any("did not return" in f["message"] and "load metadata" in f["message"] for f in report["findings"])
    assert result.lost == {} and result.seconds < 60
