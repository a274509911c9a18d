"""Deployment readers: each format read unchanged from example files we wrote in the
shapes of the real formats (tests/data/deployments/), instances and routers asserted.

Expected values come from the formats' own rules: the kubelet's $(VAR) expansion, the
LeaderWorkerSet size, srt-slurm's build_worker_command/allocate_endpoints (commit
c88ef731: ports 6100+32k, bootstrap 7200+k, nccl 17500+, --dist-init-addr LEADER:8300),
Dynamo's split of its own flags, and shell quoting/expansion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.errors import InputError
from kvcheck.sources.deployments import read_deployments
from kvcheck.sources.deployments import yamlnodes

DATA = Path(__file__).parent / "data" / "deployments"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("DECODE_TP", "MODEL", "TP", "A", "B", "LWS_LEADER_ADDRESS", "RBG_LWP_LEADER_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def one(path: str, env=None):
    deps = read_deployments([DATA / path], env=env or {})
    assert len(deps) == 1
    return deps[0]


def by_role(dep, role):
    return [i for i in dep.instances if i.role == role]


def test_multi_document_manifest_with_list():
    dep = one("multi-doc-list.yaml")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert (p.kind, p.replicas, p.gpus, p.gpu_type, p.image) == ("Deployment", 4, 8, "h100", "lmsysorg/sglang:v0.5.23-cu129")
    assert "gpu.product" in p.gpu_source
    # $(MODEL) expanded from the container env, as the kubelet does
    assert p.argv[:2] == ["--model-path", "deepseek-ai/DeepSeek-V3"]
    assert p.arg_locations["--disaggregation-mode"].line == 32
    assert p.env["MODEL"] == "deepseek-ai/DeepSeek-V3" and "HF_TOKEN" not in p.env
    assert p.host_network is False
    # bash -c block: export + ${DECODE_TP:-8} default, lines inside the block scalar
    assert (d.kind, d.replicas, d.gpu_type, d.gpus) == ("StatefulSet", 2, "h200", 8)
    assert d.argv[d.argv.index("--tp-size") + 1] == "8"
    assert d.arg_locations["--tp-size"].line == 71
    assert d.unresolved == []


def test_leaderworkerset_is_one_multinode_instance():
    dep = one("lws-multinode.yaml")
    (d,) = dep.instances
    assert (d.role, d.replicas, d.nodes, d.host_network) == ("decode", 3, 2, True)
    assert len(d.node_argvs) == 2
    # $(LWS_WORKER_INDEX) is injected by the LWS controller: the worker pod is rank 1
    assert d.node_argvs[1][d.node_argvs[1].index("--node-rank") + 1] == "1"
    # the leader address is injected too: a symbol, the same on both nodes, not unresolved
    assert d.unresolved == []
    assert {a[a.index("--dist-init-addr") + 1] for a in d.node_argvs} == {"$(LWS_LEADER_ADDRESS):5000"}
    assert d.arg_locations["--dist-init-addr"].line == 27


def test_dynamo_graph_deployment_strips_dynamo_flags():
    dep = one("dynamo-dgd.yaml")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert p.launcher == "dynamo.sglang"
    assert (p.replicas, p.nodes, p.gpus, p.gpu_type) == (2, 2, 8, "b200")
    assert p.launcher_args == ["--namespace", "dynamo", "--request-plane", "tcp", "--use-sglang-tokenizer"]
    assert "--namespace" not in p.argv and p.argv[p.argv.index("--tp") + 1] == "16"
    # multinode.nodeCount 2 without --nnodes: the operator adds SGLang's multi-node flags
    assert [a[a.index("--node-rank") + 1] for a in p.node_argvs] == ["0", "1"]
    assert {a[a.index("--nnodes") + 1] for a in p.node_argvs} == {"2"}
    assert d.launcher_args == ["--dump-config-to", "/tmp/cfg.json"]  # from an sh -c string
    assert d.argv[-2:] == ["--disaggregation-transfer-backend", "nixl"]


def test_rolebasedgroup_router_and_leader_worker_pattern():
    dep = one("rbg-lwp.yaml")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert (p.replicas, p.port, d.nodes, d.replicas) == (2, 8000, 2, 1)
    assert [a[a.index("--node-rank") + 1] for a in d.node_argvs] == ["0", "1"]
    assert [a[a.index("--nnodes") + 1] for a in d.node_argvs] == ["2", "2"]
    (r,) = dep.routers
    assert r.prefills[0].bootstrap_port == 9001 and r.prefills[0].instance == p.name
    assert r.decode_instances == [d.name]


def test_ome_runtime_engine_decoder_router():
    dep = one("ome-runtime.yaml")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert (p.replicas, p.gpus, d.nodes) == (2, 4, 2)
    assert [a[a.index("--node-rank") + 1] for a in d.node_argvs] == ["0", "1"]
    assert dep.routers[0].service_discovery is True


def test_stormservice_roles():
    dep = one("stormservice.yaml")
    assert [(i.role, i.replicas) for i in dep.instances] == [("prefill", 3), ("decode", 1)]
    assert dep.instances[0].arg_locations["--disaggregation-mode"].line == 21


def test_srt_slurm_6p2d_packed_on_two_nodes():
    dep = one("recipe-6p2d.yaml")
    pre, dec = by_role(dep, "prefill"), by_role(dep, "decode")
    assert len(pre) == 6 and len(dec) == 2
    assert [i.hosts for i in pre] == [["node0"]] * 4 + [["node1"]] * 2
    assert [i.hosts for i in dec] == [["node1"]] * 2  # decode_nodes: 0 shares the prefill node
    assert [i.port for i in pre[:4]] == [6100, 6132, 6164, 6196]
    bports = [i.argv[i.argv.index("--disaggregation-bootstrap-port") + 1] for i in pre]
    assert bports == ["7200", "7201", "7202", "7203", "7200", "7201"]
    assert all(i.image == "0.5.23" and i.gpu_type == "h200" and i.gpus == 2 for i in dep.instances)
    assert pre[0].launcher == "sglang.launch_server" and pre[0].argv[:2] == ["--model-path", "/model"]
    # model.path "qwen3-8b" names the catalog's Qwen/Qwen3-8B (matched by name; /model is in the image)
    assert pre[0].model == "Qwen/Qwen3-8B" and pre[0].model_clue.startswith("srt-slurm model.path at ")


def test_srt_slurm_sweep_and_multinode_workers():
    deps = read_deployments([DATA / "recipe-sweep.yaml"], env={})
    assert [d.variant for d in deps] == ["sweep[0] mem=0.8", "sweep[1] mem=0.9"]
    d0 = deps[0]
    pre = by_role(d0, "prefill")
    assert len(pre) == 2 and all(i.nodes == 2 for i in d0.instances)
    a0, a1 = pre[0].node_argvs
    assert a0[a0.index("--node-rank") + 1] == "0" and a1[a1.index("--node-rank") + 1] == "1"
    assert a0[a0.index("--dist-init-addr") + 1] == "node0:8300"
    assert pre[0].argv[pre[0].argv.index("--mem-fraction-static") + 1] == "0.8"
    assert pre[0].launcher == "dynamo.sglang" and pre[0].launcher_args == ["--request-plane", "tcp"]
    assert pre[0].argv[:2] == ["--model-path", "deepseek-ai/DeepSeek-V3"]  # hf: model id
    assert pre[0].env == {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "600"}
    assert "--enable-dp-attention" not in pre[0].argv and "--trust-remote-code" in pre[0].argv
    assert pre[0].arg_locations["--mem-fraction-static"].line == 24


def test_srt_slurm_overrides():
    deps = read_deployments([DATA / "recipe-overrides.yaml"], env={})
    assert [d.name for d in deps] == ["ov_bigpage", "ov_tp_0", "ov_tp_1"]
    tp = [d.instances[0].argv[d.instances[0].argv.index("--tp-size") + 1] for d in deps[1:]]
    assert tp == ["2", "4"]
    big = deps[0].instances[0]
    assert big.argv[big.argv.index("--page-size") + 1] == "64" and big.arg_locations["--page-size"].line == 24


def test_shell_script_wrappers_variables_router():
    dep = one("launch.sh")
    (p,) = by_role(dep, "prefill")
    d1, d2 = by_role(dep, "decode")
    assert p.argv[p.argv.index("--tp-size") + 1] == "2" and p.arg_locations["--tp-size"].line == 10
    assert (d1.image, d1.env["UCX_TLS"], d1.host_network) == ("lmsysorg/sglang:v0.5.23", "rc,cuda_copy", True)
    (u,) = d1.unresolved
    assert (u.variable, u.flag) == ("DECODE_TP", "--tp-size")
    assert d2.launcher == "sglang serve" and d2.env["CUDA_VISIBLE_DEVICES"] == "4,5"
    (r,) = dep.routers
    assert r.prefills[0].bootstrap_port == 8998 and r.prefills[0].instance == p.name
    assert r.decode_instances == [d1.name, d2.name]


def test_env_argument_resolves_variables():
    dep = one("launch.sh", env={"DECODE_TP": "4"})
    d1 = by_role(dep, "decode")[0]
    assert d1.unresolved == [] and d1.argv[d1.argv.index("--tp-size") + 1] == "4"


def test_markdown_docs_block_multinode():
    dep = one("docs.md")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert p.location.line == 6
    assert d.nodes == 2 and [loc.line for loc in d.node_locations] == [12, 14]


@pytest.mark.parametrize(
    "name, words",
    [
        ("no-sglang.yaml", ["no-sglang.yaml", "no container launches"]),
        ("recipe-no-decode.yaml", ["recipe-no-decode.yaml", "no decode", "line 6"]),
        ("syntax-error.yaml", ["syntax-error.yaml", "YAML syntax error at line"]),
    ],
)
def test_bad_inputs_are_input_errors(name, words):
    with pytest.raises(InputError) as exc:
        read_deployments([DATA / name], env={})
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.exit_code == 2
    for w in words:
        assert w in msg


def test_shell_assignments_run_in_order_and_env_cycles_are_input_errors():
    # export A="${B}"; export B="${A}": a shell expands each when it runs (A from the
    # unset B), never recursively: --model-path stays unresolved, no error
    [dep] = read_deployments([DATA / "cyclic.sh"], env={})
    assert [u.variable for u in dep.instances[0].unresolved] == ["B"]
    # values that refer to each other in --env (expanded when used) are a cycle
    with pytest.raises(InputError) as exc:
        read_deployments([DATA / "cyclic.sh"], env={"B": "${C}", "C": "${B}"})
    assert "refers to itself" in str(exc.value) and "B -> C -> B" in str(exc.value) and exc.value.exit_code == 2


def test_oversize_file_refused_before_parsing(tmp_path, monkeypatch):
    f = tmp_path / "big.yaml"
    f.write_text("kind: List\nitems: []\n" + "#" * 2000)
    monkeypatch.setattr(yamlnodes, "MAX_FILE_BYTES", 1000)
    with pytest.raises(InputError, match="over kvcheck's limit"):
        read_deployments([f])


def test_alias_bomb_refused(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for k in range(1, 9):
        lines.append(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 10) + "]")
    lines.append("kind: List")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="alias bomb"):
        read_deployments([f])


def test_deep_nesting_refused(tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text("kind: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InputError, match="nesting"):
        read_deployments([f])


SHARED = Path("/work/shared/deployments")


@pytest.mark.skipif(not SHARED.is_dir(), reason="published deployments not present")
@pytest.mark.parametrize("case", sorted(p.name for p in SHARED.glob("*") if p.is_dir()) if SHARED.is_dir() else [])
def test_published_deployments_read_unchanged(case):
    folder = SHARED / case
    expect = json.loads((folder / "expect.json").read_text())
    deps = read_deployments([folder / f for f in expect["inputs"]], env={})
    import re as _re

    named = _re.search(r"\[([^\]]+\])\]\s*$", expect.get("source", "")) or _re.search(r"\[([^\]]+)\]\s*$", expect.get("source", ""))
    if named and any(d.variant for d in deps):
        # a recipe with sweeps/overrides: the variant the expectation names
        deps = [d for d in deps if d.variant == named.group(1)] or deps
    inst = [i for d in deps for i in d.instances]
    n_p = sum(i.replicas for i in inst if i.role == "prefill")
    n_d = sum(i.replicas for i in inst if i.role == "decode")
    topo = expect["topology"]
    if "from the issue text" in expect.get("format", ""):
        pytest.skip("the topology comes from an issue's text, not from the files read")
    import re

    m = re.match(r"(\d+)P\b.*?,\s*(\d+)D\b", topo)
    if not m:
        pytest.skip(f"topology {topo!r} is not in the 'NP ..., MD ...' shape this test reads")
    assert (n_p, n_d) == (int(m.group(1)), int(m.group(2)))
    # "6P x TP2, 2D x TP2": each side's tensor-parallel size as written in its args
    for role, side in zip(("prefill", "decode"), topo.split(",", 1)):
        tp = re.search(r"x TP(\d+)", side)
        if not tp:
            continue
        for i in inst:
            if i.role == role:
                v = next(i.argv[k + 1] for k, t in enumerate(i.argv) if t in ("--tp", "--tp-size", "--tensor-parallel-size"))
                assert v == tp.group(1)


def test_docker_compose_services():
    dep = one("compose.yaml")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert (p.kind, p.image, p.gpus, p.host_network, p.env) == ("compose", "lmsysorg/sglang:v0.5.23", 2, True, {"NCCL_IB_DISABLE": "0"})
    assert p.argv[:2] == ["--model-path", "Qwen/Qwen3-8B"]  # ${MODEL:-...} default
    assert d.env == {"UCX_TLS": "rc,cuda_copy"} and d.arg_locations["--base-gpu-id"].line == 23
    (r,) = dep.routers
    assert r.prefills[0].instance == p.name and r.decode_instances == [d.name]


def test_downward_api_values_are_resolved_by_the_platform_or_left_unresolved():
    """A ``valueFrom.fieldRef`` is the pod's own field: the LWS worker-index label and size
    annotation are what the LWS controller sets (0 on the leader, 1..size-1 on the workers;
    the group's pod count: kubernetes-sigs/lws ``AddLWSVariables``), any other field, a
    ConfigMap key or a Secret is unknown, never the literal text the file writes."""
    dep = one("lws-fieldref-pd.yaml")
    (p,), (d,) = by_role(dep, "prefill"), by_role(dep, "decode")
    assert [a[a.index("--node-rank") + 1] for a in p.node_argvs] == ["0", "1"]
    assert [a[a.index("--nnodes") + 1] for a in p.node_argvs] == ["2", "2"]
    assert p.unresolved == [] and [u.flag for u in p.symbolic] == ["--host"]
    got = {u.variable: (u.flag, u.origin) for u in d.unresolved}
    assert got["TP_FROM_ANNOTATION"][0] == "--tp-size" and "example.org/tp" in got["TP_FROM_ANNOTATION"][1]
    assert got["PAGE"][0] == "--page-size" and "ConfigMap serving-knobs" in got["PAGE"][1]
    # pinned with --env, the value is taken as given
    (d2,) = by_role(one("lws-fieldref-pd.yaml", env={"TP_FROM_ANNOTATION": "2", "PAGE": "16"}), "decode")
    assert d2.unresolved == [] and d2.argv[d2.argv.index("--tp-size") + 1] == "2"


def test_downward_api_value_is_unchecked_not_a_parser_refusal():
    from tests.helpers import run_cli

    proc = run_cli("preflight", "-f", str(DATA / "lws-fieldref-pd.yaml"), "--format", "json")
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert "startup-argparse" not in proc.stdout and "(not shown)" not in proc.stdout
    assert "metadata.annotations['example.org/tp']" in proc.stdout
