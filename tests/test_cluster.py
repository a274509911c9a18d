"""The cluster pipeline (kvcheck.cluster) on deployments built in the test: classes,
pairs decided once, unchecked outcomes, cluster-wide checks, and the report formats.

The readers (kvcheck.sources.deployments.read_deployments) are exercised end to end in
tests/test_cluster_cli.py; here ``Deployment``/``Instance`` objects are written directly,
in the shape the readers return.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from kvcheck.checks.base import Severity
from kvcheck.cluster import ClusterOptions, check_deployments
from kvcheck.cluster.checks import CLUSTER_CHECKS
from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Router, RouterPrefill, Unresolved

LLAMA = "meta-llama/Meta-Llama-3.1-8B"  # in kvcheck's catalog: 32 layers, 8 KV heads, head dim 128
IMAGE = "lmsysorg/sglang:v0.5.23-cu129"


def inst(role, name, *extra, model=LLAMA, backend="nixl", line=1, image=IMAGE, **kw):
    argv = ["--model-path", model, "--disaggregation-mode", role, "--tp-size", "2", "--page-size", "16"]
    if backend:
        argv += ["--disaggregation-transfer-backend", backend]
    argv += list(extra)
    locs = kw.pop("arg_locations", {})
    return Instance(role=role, name=name, location=Location("deploy.yaml", line), argv=argv, image=image, arg_locations=locs, **kw)


def dep(*instances, routers=(), name="d"):
    return Deployment(name=name, source=Location("deploy.yaml"), instances=list(instances), routers=list(routers))


def ids(located):
    return [x.finding.id for x in located]


def test_identical_instances_form_one_class_and_each_pair_is_decided_once(monkeypatch):
    import kvcheck.preflight as pf

    calls = []
    real = pf.run_preflight

    def counting(p, d, **kw):
        calls.append((p.origin, d.origin))
        return real(p, d, **kw)

    monkeypatch.setattr(pf, "run_preflight", counting)
    prefills = [inst("prefill", f"p{i}") for i in range(40)]
    decodes = [inst("decode", f"d{i}") for i in range(30)] + [inst("decode", "d-odd", "--page-size", "32", arg_locations={"--page-size": Location("deploy.yaml", 77)})]
    # The GPU given: one decision per class pair (without it, one per GPU of the window).
    r = check_deployments([dep(*prefills, *decodes)], ClusterOptions(gpu="h100"))
    d = r.deployments[0]
    assert [c.id for c in d.classes] == ["prefill-1", "decode-1", "decode-2"]
    assert [len(c.members) for c in d.classes] == [40, 30, 1]
    assert len(calls) == 2  # 40 x 31 instances, 1 x 2 classes
    verdicts = {(p.prefill.id, p.decode.id): p.verdict for p in d.pairs}
    assert verdicts == {("prefill-1", "decode-1"): "pass", ("prefill-1", "decode-2"): "fail"}
    bad = next(p for p in d.pairs if p.verdict == "fail")
    # The decode raises SGLang's own page-size check (common/conn.py, 0.5.23), located on the manifest line.
    pm = next(x for x in bad.findings if x.finding.id == "page-size-mismatch")
    assert pm.location == Location("deploy.yaml", 77)
    assert "page_size=16" in pm.finding.runtime_error.message and "page_size=32" in pm.finding.runtime_error.message
    assert r.verdict == "fail" and r.exit_code == 1
    good = next(p for p in d.pairs if p.verdict == "pass")
    plan = good.contract()["plan"]
    # Llama 3.1 8B: 32 layers -> 64 K/V regions on each side, one VRAM -> VRAM segment.
    assert (plan["n_src"], plan["n_dst"], plan["segments"]) == (64, 64, [[0, 64, "VRAM", "VRAM"]])


def test_json_contract_keys_and_lead_plan():
    r = check_deployments([dep(inst("prefill", "p0"), inst("decode", "d0"))])
    c = json.loads(json.dumps(r.contract()))
    for key in ("verdict", "plan", "findings", "instances", "classes", "pairs", "exit_code", "kernel", "runtime"):
        assert key in c
    assert c["verdict"] == "pass" and c["exit_code"] == 0
    assert c["pairs"][0]["prefill_class"] == "prefill-1" and c["pairs"][0]["decode_class"] == "decode-1"
    assert c["plan"] == c["pairs"][0]["plan"]
    i0 = c["instances"][0]
    assert (i0["role"], i0["name"], i0["file"], i0["line"], i0["sglang_release"]) == ("prefill", "p0", "deploy.yaml", 1, "0.5.23")
    assert i0["kv_args"]["tp_size"] == 2 and i0["kv_args"]["page_size"] == 16
    assert i0["model_source"].startswith("kvcheck catalog: meta-llama/Meta-Llama-3.1-8B")


def test_unknown_model_is_unchecked_exit_4_and_allow_unchecked_exits_0():
    d = dep(inst("prefill", "p0", model="acme/NotAModel-7B"), inst("decode", "d0", model="acme/NotAModel-7B"))
    r = check_deployments([d])
    assert r.verdict == "unchecked" and r.exit_code == 4
    f = next(x.finding for x in r.deployments[0].pairs[0].findings if x.finding.id == "unknown-model")
    assert f.severity == Severity.UNCHECKED and "acme/NotAModel-7B" in f.message and "--model-config" in f.fix
    r2 = check_deployments([d], ClusterOptions(allow_unchecked=True))
    assert r2.verdict == "unchecked" and r2.exit_code == 0 and r2.contract()["allow_unchecked"] is True


def test_unresolved_variable_is_a_named_unchecked_finding_not_bad_input():
    loc = Location("deploy.yaml", 12)
    p = inst("prefill", "p0")
    p.argv = [a if a != "2" else "${TP}" for a in p.argv]
    p.unresolved = [Unresolved("TP", "--tp-size", loc)]
    r = check_deployments([dep(p, inst("decode", "d0"))])
    assert r.verdict == "unchecked" and r.exit_code == 4
    f = next(x for x in r.deployments[0].pairs[0].findings if x.finding.id == "unresolved-variable")
    assert f.finding.message == "`--tp-size ${TP}`: TP is not set; pass --env FILE or set it"
    assert f.location == loc
    assert r.deployments[0].classes[0].side is None


def test_mooncake_pair_is_decided_and_keeps_bootstrap_errors():
    # Mooncake (the default backend) is decided by its own restated transfer
    # (kvcheck.sglang.mooncake), the same as on the pair path; MORI is unchecked.
    same = check_deployments([dep(inst("prefill", "p0", backend=None), inst("decode", "d0", backend=None))])
    pair = same.deployments[0].pairs[0]
    assert pair.verdict == "pass" and "backend-not-modeled" not in ids(pair.findings)
    assert "transfer-backend" not in ids(pair.findings) and pair.contract()["plan"]["path"] == "equal_tp"
    mori = check_deployments([dep(inst("prefill", "p0", backend="mori"), inst("decode", "d0", backend="mori"))])
    pair = mori.deployments[0].pairs[0]
    assert pair.verdict == "unchecked" and "backend-unchecked" in ids(pair.findings)
    mismatch = check_deployments([dep(inst("prefill", "p0", backend=None), inst("decode", "d0", "--page-size", "64", backend="mooncake"))])
    pair = mismatch.deployments[0].pairs[0]
    # The decode's page-size comparison runs for every backend (CommonKVReceiver, 0.5.23).
    assert pair.verdict == "fail" and "page-size-mismatch" in ids(pair.findings)


def test_mixed_backends_fail_the_cluster():
    r = check_deployments([dep(inst("prefill", "p0"), inst("decode", "d0"), inst("decode", "d1", backend="mooncake"))])
    assert "one-backend" in ids(r.deployments[0].findings)
    assert r.verdict == "fail"


def test_missing_role():
    r = check_deployments([dep(inst("prefill", "p0"), inst("prefill", "p1"))])
    f = r.deployments[0].findings
    assert ids(f) == ["missing-role"] and "2 prefill instance(s) and no decode" in f[0].finding.message
    assert r.exit_code == 1


def test_bootstrap_port_clash_on_a_shared_host():
    a = inst("prefill", "p0", "--disaggregation-bootstrap-port", "9000", hosts=["node1"], arg_locations={"--disaggregation-bootstrap-port": Location("run.sh", 3)})
    b = inst("prefill", "p1", "--disaggregation-bootstrap-port", "9000", "--port", "30001", hosts=["node1"], arg_locations={"--disaggregation-bootstrap-port": Location("run.sh", 9)})
    c = inst("prefill", "p2", "--disaggregation-bootstrap-port", "9000", hosts=["node2"])
    r = check_deployments([dep(a, b, c, inst("decode", "d0", hosts=["node1"]))])
    clash = [x for x in r.deployments[0].findings if x.finding.id == "bootstrap-port-clash"]
    assert len(clash) == 1 and "host node1" in clash[0].finding.message and clash[0].location == Location("run.sh", 9)
    # The decode (no bootstrap server: start_disagg_service starts it on a prefill only) shares node1 at 30000 with p0: no clash.
    ok = check_deployments([dep(a, inst("decode", "d0", hosts=["node1"], line=5), inst("decode", "d1", "--port", "8998", hosts=["node1"]))])
    assert "bootstrap-port-clash" not in ids(ok.deployments[0].findings)


def test_router_bootstrap_port_must_be_the_prefills():
    p = inst("prefill", "prefill-0", "--disaggregation-bootstrap-port", "8999")
    router_loc = Location("router.yaml", 20)
    bad = Router(location=router_loc, prefills=[RouterPrefill("http://prefill-0:30000", 8998)], decodes=["http://decode-0:30000"])
    r = check_deployments([dep(p, inst("decode", "decode-0"), routers=[bad])])
    f = [x for x in r.deployments[0].findings if x.finding.id == "router-bootstrap-port"]
    assert len(f) == 1 and f[0].location == router_loc and "8999" in f[0].finding.message
    good = Router(location=router_loc, prefills=[RouterPrefill("http://prefill-0:30000", 8999)], decodes=[])
    r = check_deployments([dep(p, inst("decode", "decode-0"), routers=[good])])
    assert "router-bootstrap-port" not in ids(r.deployments[0].findings)


def test_dp_rank_mapping_force_query_on_decode_only():
    p = inst("prefill", "p0", "--dp-size", "2", "--enable-dp-attention")
    force = {"SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK": "1"}
    r = check_deployments([dep(p, inst("decode", "d0", env=dict(force)))])
    assert "dp-rank-mapping" in ids(r.deployments[0].findings)
    # Both sides set it: the prefill registers each room's rank (CommonKVSender, 0.5.23).
    p2 = inst("prefill", "p0", "--dp-size", "2", "--enable-dp-attention", env=dict(force))
    r = check_deployments([dep(p2, inst("decode", "d0", env=dict(force)))])
    assert "dp-rank-mapping" not in ids(r.deployments[0].findings)
    # Decode DP sizes never matter on their own: a DP 4 decode with a DP 2 prefill maps.
    r = check_deployments([dep(p, inst("decode", "d0", "--dp-size", "4", "--enable-dp-attention", "--tp-size", "4"))])
    assert "dp-rank-mapping" not in ids(r.deployments[0].findings)


def test_multinode_args_must_agree():
    base = ["--nnodes", "2", "--dist-init-addr", "10.0.0.1:5000"]
    node0 = inst("decode", "d0", *base, "--node-rank", "0").argv
    node1 = inst("decode", "d0", "--nnodes", "2", "--dist-init-addr", "10.0.0.2:5000", "--node-rank", "0").argv
    d = inst("decode", "d0", *base, "--node-rank", "0", nodes=2, node_argvs=[node0, node1])
    r = check_deployments([dep(inst("prefill", "p0"), d)])
    msgs = [x.finding.message for x in r.deployments[0].findings if x.finding.id == "multinode-args"]
    assert any("--dist-init-addr" in m for m in msgs) and any("--node-rank values [0, 0]" in m for m in msgs)
    node1_ok = inst("decode", "d0", *base, "--node-rank", "1").argv
    d_ok = inst("decode", "d0", *base, "--node-rank", "0", nodes=2, node_argvs=[node0, node1_ok])
    r = check_deployments([dep(inst("prefill", "p0"), d_ok)])
    assert "multinode-args" not in ids(r.deployments[0].findings)


def test_release_from_image_and_sglang_version_option():
    import kvcheck.sglang.releases as releases

    r = check_deployments([dep(inst("prefill", "p0", image="nvcr.io/nvidia/ai-dynamo/sglang-runtime:9.0.0"), inst("decode", "d0"))])
    f = next(x.finding for x in r.deployments[0].pairs[0].findings if x.finding.id == "unknown-release")
    assert "--sglang-version" in f.fix
    if hasattr(releases, "choose_release"):  # the per-release model: an unknown release is never judged
        assert f.severity == Severity.UNCHECKED and r.deployments[0].instances[0].release is None
    else:  # before it: checked as the newest modeled release, said
        assert f.severity == Severity.WARNING and r.deployments[0].instances[0].release == "0.5.23"
    assert r.deployments[0].instances[1].release == "0.5.23"  # lmsysorg/sglang:v0.5.23-cu129
    r = check_deployments([dep(inst("prefill", "p0", image=None), inst("decode", "d0", image=None))], ClusterOptions(sglang_version="0.5.23"))
    assert "unknown-release" not in ids(r.deployments[0].pairs[0].findings)
    assert r.deployments[0].classes[0].side.version_source == "--sglang-version"


def test_ignore_a_cluster_finding():
    d = dep(inst("prefill", "p0"), inst("decode", "d0"), inst("decode", "d1", backend="mooncake"))
    r = check_deployments([d], ClusterOptions(ignore=("one-backend", "transfer-backend")))
    assert all(x.finding.ignored for x in r.deployments[0].findings if x.finding.id == "one-backend")


def test_a_flag_no_release_accepts_is_that_servers_start_up_refusal():
    # Issue 14: a server flag the runtime refuses is a failed deployment (exit 1), named
    # at its instance, not kvcheck's bad input (exit 2).
    p = inst("prefill", "p0", "--page-sise", "16")
    r = check_deployments([dep(p, inst("decode", "d0"))])
    f = next(x for x in r.deployments[0].pairs[0].findings if x.finding.id == "startup-argparse")
    assert f.finding.severity == Severity.ERROR and "p0" in f.finding.message and "--page-size" in f.finding.fix
    assert f.finding.runtime_error.message == "unrecognized arguments: --page-sise 16"
    assert r.exit_code == 1


def test_no_instances_is_bad_input():
    with pytest.raises(InputError, match="no SGLang prefill or decode server"):
        check_deployments([dep()])


def test_sweep_deployments_worst_verdict_and_tagged_lists():
    ok = dep(inst("prefill", "p0"), inst("decode", "d0"), name="s")
    ok.variant = "sweep[0]"
    bad = dep(inst("prefill", "p0"), inst("decode", "d0", "--page-size", "32"), name="s")
    bad.variant = "sweep[1]"
    r = check_deployments([ok, bad])
    c = r.contract()
    assert c["verdict"] == "fail" and [d["verdict"] for d in c["deployments"]] == ["pass", "fail"]
    assert {p["deployment"] for p in c["pairs"]} == {"sweep[0]", "sweep[1]"}


def test_junit_one_suite_per_pair_plus_cluster():
    from kvcheck.report.junit import render_cluster_junit

    r = check_deployments([dep(inst("prefill", "p0"), inst("decode", "d0"), inst("decode", "d1", "--page-size", "32"))])
    root = ET.fromstring(render_cluster_junit(r))
    names = [s.get("name") for s in root.iter("testsuite")]
    assert names == ["kvcheck pair prefill-1 x decode-1", "kvcheck pair prefill-1 x decode-2", "kvcheck cluster"]
    failing = [c.get("name") for s in root.iter("testsuite") if s.get("name").endswith("decode-2") for c in s.iter("testcase") if c.find("failure") is not None]
    assert "bootstrap" in failing
    cluster_cases = [c.get("name") for s in root.iter("testsuite") if s.get("name") == "kvcheck cluster" for c in s.iter("testcase")]
    assert set(CLUSTER_CHECKS) <= set(cluster_cases)


def test_github_annotations_carry_file_and_line():
    from kvcheck.report.github import render_cluster_github

    d1 = inst("decode", "d1", "--page-size", "32", arg_locations={"--page-size": Location("deploy/decode.yaml", 42)})
    r = check_deployments([dep(inst("prefill", "p0"), d1)])
    out = render_cluster_github(r).splitlines()
    pm = next(line for line in out if "page-size-mismatch" in line)
    assert pm.startswith("::error file=deploy/decode.yaml,line=42,title=kvcheck page-size-mismatch")
    assert out[-1].startswith("::error title=kvcheck verdict::FAIL")


def test_terminal_lists_instances_classes_pairs_findings():
    from rich.console import Console

    from kvcheck.report.terminal import render_cluster_terminal

    r = check_deployments([dep(inst("prefill", "p0"), inst("decode", "d0"), inst("decode", "d1", "--page-size", "32"))])
    console = Console(record=True, width=200)
    render_cluster_terminal(r, console)
    text = console.export_text()
    assert text.startswith("FAIL  3 instance(s), 2 pair(s): 1 fail, 1 pass")
    for word in ("instances", "classes", "pairs", "page-size-mismatch", "decode-2"):
        assert word in text


def test_terminal_header_says_no_gpu_was_assumed_when_no_pair_was_decided():
    # A side without a GPU is decided on Hopper and on Blackwell (ASSUMED_GPUS), never on
    # its placeholder: with no pair, nothing was decided on a GPU, and the header says so
    # (it said "GPU h100 (assumed ...)")
    from rich.console import Console

    from kvcheck.release.window import ASSUMED_GPUS
    from kvcheck.report.terminal import render_cluster_terminal

    r = check_deployments([dep(inst("prefill", "p0"), inst("prefill", "p1"))])
    assert r.deployments[0].pairs == [] and any(c.side is not None for c in r.deployments[0].classes)
    console = Console(record=True, width=300)
    render_cluster_terminal(r, console)
    head = console.export_text().splitlines()[0]
    assert "0 pair(s)" in head and "assumed" not in head
    assert f"GPU not given (no pair was decided on a GPU; a pair's side without one is decided on {' and '.join(ASSUMED_GPUS)})" in head
    assert ASSUMED_GPUS == ("h100", "b200")


def test_single_role_files_are_combined_complete_ones_are_not():
    p, d = dep(inst("prefill", "p0"), name="prefill.yaml"), dep(inst("decode", "d0"), name="decode.yaml")
    r = check_deployments([p, d])
    assert len(r.deployments) == 1 and r.deployments[0].deployment.name == "prefill.yaml + decode.yaml"
    assert [x.verdict for x in r.deployments[0].pairs] == ["pass"]
    a = dep(inst("prefill", "p0"), inst("decode", "d0"), name="a")
    b = dep(inst("prefill", "p1", "--page-size", "32"), inst("decode", "d1", "--page-size", "32"), name="b")
    r = check_deployments([a, b])
    assert [len(x.pairs) for x in r.deployments] == [1, 1] and r.verdict == "pass"


def test_reader_problems_become_named_findings():
    from kvcheck.sources.deployments.instance import Problem

    d = dep(inst("prefill", "p0"), inst("decode", "d0"))
    d.problems = [Problem("not-disaggregated", "x.yaml:3: an SGLang server without --disaggregation-mode", Location("x.yaml", 3), "add it"),
                  Problem("unresolved-role", "x.yaml:9: --disaggregation-mode $ROLE", Location("x.yaml", 9), "pass --env")]
    r = check_deployments([d])
    sev = {x.finding.id: x.finding.severity for x in r.deployments[0].findings}
    assert sev == {"not-disaggregated": Severity.WARNING, "unresolved-role": Severity.UNCHECKED}
    assert r.verdict == "unchecked"
    assert check_deployments([d], ClusterOptions(ignore=("unresolved-role",))).verdict == "warn"


def test_bootstrap_port_alone_does_not_split_a_class():
    ps = [inst("prefill", f"p{i}", "--disaggregation-bootstrap-port", str(7200 + i)) for i in range(6)]
    r = check_deployments([dep(*ps, inst("decode", "d0"))])
    assert [c.id for c in r.deployments[0].classes] == ["prefill-1", "decode-1"]
