"""The fabric's plan without a network: SGLang's rank mapping (driven with the runtime's
own ``CommonKVManager._resolve_rank_mapping`` and ``derive_attention_ranks``), the rounds,
the node pairs of a deployment, ``--emit`` and the CLI's input errors."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from kvcheck.fabric.mapping import Parallel, decode_reads, node_pairs
from kvcheck.fabric.rounds import schedule

REPO = Path(__file__).resolve().parent.parent


def _runtime_mapping(prefill: Parallel, decode: Parallel, tp_rank: int, pp_rank: int):
    """SGLang's own decision: a decode manager made with ``object.__new__`` and the
    attributes ``_resolve_rank_mapping`` reads, the prefill's ``/route`` as ``PrefillServerInfo``."""
    conn = pytest.importorskip("sglang.srt.disaggregation.common.conn")
    mgr = object.__new__(conn.CommonKVManager)
    mgr.is_mla_backend = decode.mla
    mgr.is_hybrid_mla_backend = False
    mgr.attn_tp_size = decode.attn_tp
    mgr.attn_cp_size = 1
    mgr.attn_cp_rank = 0
    mgr.pp_size = decode.pp
    mgr.pp_rank = pp_rank
    mgr.enable_all_cp_ranks_for_transfer = True
    mgr.kv_args = SimpleNamespace(engine_rank=tp_rank % decode.attn_tp)  # disaggregation/decode.py
    info = conn.PrefillServerInfo(attn_tp_size=prefill.attn_tp, attn_cp_size=prefill.cp, dp_size=prefill.dp, pp_size=prefill.pp,
                                  page_size=16, kv_cache_dtype="auto", follow_bootstrap_room=True, enable_kv_cache_sharding=prefill.kv_sharding)
    mgr._resolve_rank_mapping(info)
    return info.target_tp_ranks, info.target_cp_ranks, info.target_pp_ranks


LAYOUTS = [  # (prefill, decode): attention TP equal / decode wider / decode narrower, DP attention, PP equal / decode PP 1, CP, MLA
    (Parallel(tp=8), Parallel(tp=8)),
    (Parallel(tp=8), Parallel(tp=16, nnodes=2)),
    (Parallel(tp=16, nnodes=2), Parallel(tp=8)),
    (Parallel(tp=16, nnodes=2, mla=True), Parallel(tp=8, mla=True)),
    (Parallel(tp=16, dp=16, nnodes=2, mla=True), Parallel(tp=32, dp=32, nnodes=4, mla=True)),
    (Parallel(tp=16, dp=2, nnodes=2), Parallel(tp=16, dp=4, nnodes=2)),
    (Parallel(tp=8, pp=2, nnodes=2), Parallel(tp=8, pp=2, nnodes=2)),
    (Parallel(tp=8, pp=4, nnodes=2), Parallel(tp=8, nnodes=1)),
    (Parallel(tp=16, cp=2, nnodes=2), Parallel(tp=8)),
    (Parallel(tp=8, mla=True, kv_sharding=True), Parallel(tp=8, mla=True)),
]


@pytest.mark.parametrize("prefill,decode", LAYOUTS)
def test_decode_reads_what_the_runtime_reads(prefill, decode):
    """For every decode rank, the prefill (attn TP, CP, PP) ranks equal the runtime's
    (CP: kvcheck takes every CP rank, a superset of what the runtime reads)."""
    from sglang.srt.runtime_context import derive_attention_ranks

    for tp_rank in range(decode.tp):
        for pp_rank in range(decode.pp):
            tps, cps, pps = decode_reads(prefill, decode, tp_rank, pp_rank)
            rt_tps, rt_cps, rt_pps = _runtime_mapping(prefill, decode, tp_rank, pp_rank)
            assert tps == rt_tps and pps == rt_pps
            assert set(rt_cps) <= set(cps)
    for par in (prefill, decode):
        for tp_rank in range(par.tp):
            a, c, d = par.attention_ranks(tp_rank)
            assert (a, d) == tuple(derive_attention_ranks(tp_rank=tp_rank, attn_tp_size=par.attn_tp, attn_cp_size=par.cp))


def test_node_pairs_follow_the_mapping():
    # decode TP 16 over 2 nodes reads prefill ranks rank // 2: node 0 -> 0..3, node 1 -> 4..7, one prefill node
    assert node_pairs(Parallel(tp=8), Parallel(tp=16, nnodes=2)) == {(0, 0), (0, 1)}
    # equal PP over 2 nodes: stage to stage, not every pair
    assert node_pairs(Parallel(tp=8, pp=2, nnodes=2), Parallel(tp=8, pp=2, nnodes=2)) == {(0, 0), (1, 1)}
    # decode PP 1 reads every prefill stage
    assert node_pairs(Parallel(tp=8, pp=2, nnodes=2), Parallel(tp=8)) == {(0, 0), (1, 0)}
    # DP attention: any decode rank may read any prefill DP rank
    assert len(node_pairs(Parallel(tp=16, dp=16, nnodes=2), Parallel(tp=32, dp=32, nnodes=4))) == 8
    assert Parallel(tp=8, pp=2, nnodes=2).ranks_on_node(1) == [(1, t) for t in range(8)]
    assert Parallel(tp=16, nnodes=2).ranks_on_node(1) == [(0, t) for t in range(8, 16)]


def test_rounds_are_matchings_and_as_few_as_the_max_degree():
    rng = random.Random(7)
    for _ in range(100):
        P, D = rng.randint(1, 9), rng.randint(1, 9)
        pairs = [(p, d) for p in range(P) for d in range(D) if rng.random() < 0.6]
        rounds = schedule(pairs)
        assert sorted(x for r in rounds for x in r) == sorted(pairs)
        for r in rounds:
            assert len({p for p, _ in r}) == len(r) == len({d for _, d in r})
        degree = max([sum(1 for x in pairs if x[0] == p) for p in range(P)] + [sum(1 for x in pairs if x[1] == d) for d in range(D)] + [0])
        assert len(rounds) == degree
    full = [(p, d) for p, d in itertools.product(range(8), range(8))]
    assert len(schedule(full)) == 8  # 64 pairs in 8 rounds of 8


def _deployment(tmp: Path, prefill: int = 2, decode: int = 4, env=None) -> Path:
    cfg = json.loads((REPO / "configs/models/llama-3.1-8b/config.json").read_text())
    cfg["num_hidden_layers"] = 2
    (tmp / "m").mkdir(exist_ok=True)
    (tmp / "m" / "config.json").write_text(json.dumps(cfg))
    docs = []
    for role, n in (("prefill", prefill), ("decode", decode)):
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"t-{role}"},
                     "spec": {"replicas": n, "template": {"spec": {
                         "hostNetwork": True, "nodeSelector": {"pool": role}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                         "containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.23-cu129", "command": ["python3", "-m", "sglang.launch_server"],
                                         "args": [f"--model-path={tmp / 'm'}", f"--disaggregation-mode={role}", "--disaggregation-transfer-backend=nixl",
                                                  "--tp-size=1", "--page-size=16"],
                                         "env": [{"name": k, "value": v} for k, v in (env or {"UCX_TLS": "tcp"}).items()],
                                         "resources": {"limits": {"nvidia.com/gpu": 1, "rdma/ib": 1}},
                                         "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]}}}})
    path = tmp / "dep.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def kvcheck(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kvcheck", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout)


def test_plan_of_a_deployment(tmp_path):
    proc = kvcheck("fabric", "-f", str(_deployment(tmp_path)), "--plan", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [n["name"] for n in plan["nodes"]] == ["t-prefill-0", "t-prefill-1", "t-decode-0", "t-decode-1", "t-decode-2", "t-decode-3"]
    assert len(plan["pairs"]) == 8 and len(plan["rounds"]) == 4
    # the default is a table, as for every command; the same plan
    table = kvcheck("fabric", "-f", str(_deployment(tmp_path)), "--plan")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].endswith(": 6 node(s), 8 required pair(s), 4 round(s)")
    assert sum(ln.startswith("  round ") for ln in lines) == 4 and all(f"  {n['name']} " in table.stdout for n in plan["nodes"])
    assert kvcheck("fabric", "-f", str(_deployment(tmp_path)), "--plan", "-o", "junit").returncode == 2


def test_emit_k8s_keeps_placement_and_devices(tmp_path):
    proc = kvcheck("fabric", "-f", str(_deployment(tmp_path, env={"UCX_TLS": "tcp", "HF_TOKEN": "hf_notarealtoken123"})), "--emit", "k8s",
                   "--start-etcd", "0:0", "--run", "r1")
    assert proc.returncode == 0, proc.stderr
    assert "hf_notarealtoken123" not in proc.stdout and "HF_TOKEN" not in proc.stdout  # only UCX/NIXL/disaggregation variables travel
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "Job", "Job"]
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    dec = jobs["kvcheck-fabric-t-decode"]["spec"]
    assert dec["completions"] == dec["parallelism"] == 4 and dec["completionMode"] == "Indexed"
    pod = dec["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "decode"} and pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    c = pod["containers"][0]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 1, "rdma/ib": 1}} and c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert {"name": "UCX_TLS", "value": "tcp"} in c["env"]
    cmd = c["command"][-1]
    assert cmd.startswith("set -- t-decode-0 t-decode-1 t-decode-2 t-decode-3; shift $JOB_COMPLETION_INDEX;")  # index -> the plan's node name
    assert "--run r1" in cmd and '--node "$1"' in cmd and "http://kvcheck-fabric-etcd:2379" in cmd
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"


def test_emit_slurm(tmp_path):
    proc = kvcheck("fabric", "-f", str(_deployment(tmp_path)), "--emit", "slurm", "--etcd", "http://etcd0:2379", "--run", "r2")
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stdout.splitlines() if x.startswith("srun")]
    assert len(lines) == 2 and "--nodes=2" in lines[0] and "--nodes=4" in lines[1]
    assert all("--ntasks-per-node=1" in x and "kvcheck.fabric.worker --etcd http://etcd0:2379 --run r2" in x and "shift $SLURM_PROCID" in x for x in lines)


@pytest.mark.parametrize("args,needle", [
    ((), "-f"),
    (("--min-fraction", "2"), "--min-fraction"),
    (("--emit", "nomad"), "--emit"),
    (("--format", "xml"), "--format"),
    (("--local",), "--etcd"),
])
def test_bad_input_exits_2(tmp_path, args, needle):
    files = () if args == () else ("-f", str(_deployment(tmp_path)))
    proc = kvcheck("fabric", *files, *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_checks_are_registered():
    from kvcheck.checks import REGISTRY
    from kvcheck.fabric.findings import FIXES

    assert set(FIXES) <= set(REGISTRY)
    proc = kvcheck("checks", "fabric-tcp-fallback")
    assert proc.returncode == 0 and "RDMA" in proc.stdout


def test_rounds_when_instances_share_a_host():
    from kvcheck.fabric.rounds import schedule_hosts

    host = {"p0": "h0", "p1": "h0", "p2": "h1", "d0": "h1", "d1": "h2"}.__getitem__
    pairs = [(p, d) for p in ("p0", "p1", "p2") for d in ("d0", "d1")]
    rounds = schedule_hosts(pairs, host)
    assert sorted(x for r in rounds for x in r) == sorted(pairs)
    for r in rounds:  # no host in two probes at once (p2 -> d0 is inside h1)
        hosts = [h for p, d in r for h in {host(p), host(d)}]
        assert len(hosts) == len(set(hosts))
