"""One pipeline (issue 15): the same deployment gets the same verdict, finding ids and exit
status as a pair (``--prefill/--decode``) and as an ``-f`` script of its two launch lines.

Each case is run in-process through the real command line (typer's runner), both ways.
The three disagreements a new user found are held here, and a generated set of pairs
(models, TP, page sizes, KV dtypes, backends, environments, pinned and unpinned
releases) is compared path against path.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest
from typer.testing import CliRunner

from helpers import REPO, model_dir

from kvcheck.cli import app
from kvcheck.errors import KvcheckError

LAUNCH = "python -m sglang.launch_server"


def _line(model: str, role: str, flags: str) -> str:
    return f"{LAUNCH} --model-path {model_dir(model)} --disaggregation-mode {role} {flags}".strip()


def _run(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(app, ["preflight", *args, "--format", "json"], catch_exceptions=False)
    assert res.stdout.strip(), res.output
    return res.exit_code, json.loads(res.stdout)


def _ids(report: dict) -> list[str]:
    out = [f["id"] for f in report["findings"] if not f.get("ignored")]
    for pair in report.get("pairs") or []:
        out += [f["id"] for f in pair["findings"] if not f.get("ignored")]
    return sorted(set(out))


def _both(tmp, model, p_flags, d_flags, *extra, decode_model=None, p_env=None, d_env=None, name="case"):
    """(pair path, -f path): each (exit status, verdict, finding ids, report)."""
    case = tmp / name
    case.mkdir()
    p_line, d_line = _line(model, "prefill", p_flags), _line(decode_model or model, "decode", d_flags + " --port 30001")
    (case / "prefill.sh").write_text(p_line + "\n")
    (case / "decode.sh").write_text(d_line + "\n")
    (case / "deploy.sh").write_text(p_line + "\n" + d_line + "\n")
    env_args = []
    for opt, env in (("--prefill-env", p_env), ("--decode-env", d_env)):
        if env:
            f = case / f"{opt[2:]}.env"
            f.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
            env_args += [opt, str(f)]
    rc_p, pair = _run("--prefill", str(case / "prefill.sh"), "--decode", str(case / "decode.sh"), *env_args, *extra)
    rc_f, dep = _run("-f", str(case / "deploy.sh"), *env_args, *extra)
    return (rc_p, pair["verdict"], _ids(pair), pair), (rc_f, dep["verdict"], _ids(dep), dep)


def _same(a, b):
    assert a[:3] == b[:3], f"pair {a[:3]} != -f {b[:3]}"


NIXL = "--disaggregation-transfer-backend nixl --page-size 16"


def test_a_mooncake_pair_gets_one_answer_on_both_paths(tmp_path):
    # Once a WARN/exit 0 as a pair and UNCHECKED/exit 4 with -f; now both paths decide it
    # with the same code (the Mooncake transfer decision, kvcheck.checks.mooncake).
    pair, dep = _both(tmp_path, "llama-3.1-8b", "--page-size 16", "--page-size 16", "--sglang-version", "0.5.23")
    _same(pair, dep)
    assert pair[0] in (0, 4)
    mixed, mixed_f = _both(tmp_path, "llama-3.1-8b", NIXL, "--page-size 16", "--sglang-version", "0.5.23", name="mixed")
    _same(mixed, mixed_f)
    assert mixed[0] == 1


def test_a_nixl_backend_the_runtime_does_not_have_fails_on_both_paths(tmp_path):
    pair, dep = _both(tmp_path, "llama-3.1-8b", NIXL, NIXL, "--sglang-version", "0.5.23",
                      p_env={"SGLANG_DISAGGREGATION_NIXL_BACKEND": "NOPE"})
    _same(pair, dep)
    assert pair[0] == 1 and pair[1] == "fail"


@pytest.mark.parametrize("typo", ["--disaggregation-mdoe prefill", "--page-sise 16"])
def test_a_typo_inside_the_file_is_that_servers_start_up_refusal_at_its_line(tmp_path, typo):
    case = tmp_path / "typo"
    case.mkdir()
    good = f"--disaggregation-transfer-backend nixl --page-size 16"
    p_line = f"{LAUNCH} --model-path {model_dir('llama-3.1-8b')} " + (typo if "mdoe" in typo else f"--disaggregation-mode prefill {typo}") + f" {good}"
    d_line = _line("llama-3.1-8b", "decode", good + " --port 30001")
    (case / "deploy.sh").write_text(f"# two servers\n{p_line}\n{d_line}\n")
    (case / "prefill.sh").write_text(p_line + "\n")
    (case / "decode.sh").write_text(d_line + "\n")
    rc, dep = _run("-f", str(case / "deploy.sh"))
    assert rc == 1 and dep["verdict"] == "fail", dep
    f = next(f for f in dep["pairs"][0]["findings"] if f["id"] == "startup-argparse")
    assert f["line"] == 2 and f["file"].endswith("deploy.sh")
    assert "unrecognized arguments: " + typo.split()[0] in f["runtime_error"]["message"]
    assert "missing-role" not in _ids(dep)
    rc_p, pair = _run("--prefill", str(case / "prefill.sh"), "--decode", str(case / "decode.sh"))
    assert (rc_p, pair["verdict"], _ids(pair)) == (rc, dep["verdict"], _ids(dep))


# A generated set: every combination is a deployment someone could write; a fixed seed
# keeps the draw (and the CI cost) the same on every run.
# (Aligned choices are listed more than once so that about half the draws pass.)
_MODELS = [("llama-3.1-8b", "llama-3.1-8b")] * 2 + [("qwen3-8b", "qwen3-8b"), ("deepseek-v3", "deepseek-v3"), ("llama-3.1-8b", "qwen3-8b")]
_TP = [(1, 1), (2, 2), (2, 2), (1, 2)]
_PAGE = [(16, 16), (16, 16), (16, 64), (None, None)]
_BACKEND = [("nixl", "nixl")] * 3 + [("nixl", "mooncake"), ("mooncake", "mooncake")]
_DTYPE = [(None, None)] * 3 + [("fp8_e4m3", "fp8_e4m3"), ("fp8_e4m3", None)]
_RELEASE = [("--sglang-version", "0.5.23"), ("--sglang-version", "0.5.12.post1"), ("--prefill-sglang-version", "0.5.22"), None]
_ENV = [None, {"SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"}]


def _flags(tp, page, backend, dtype):
    out = [f"--tp-size {tp}", f"--disaggregation-transfer-backend {backend}"]
    if page:
        out.append(f"--page-size {page}")
    if dtype:
        out.append(f"--kv-cache-dtype {dtype}")
    return " ".join(out)


_CASES = random.Random(15).sample(list(itertools.product(_MODELS, _TP, _PAGE, _BACKEND, _DTYPE, _RELEASE, _ENV)), 16)


@pytest.mark.parametrize("n", range(len(_CASES)))
def test_generated_pairs_agree_as_a_pair_and_as_an_f_script(tmp_path, n):
    (pm, dm), (ptp, dtp), (pp, dp), (pb, db), (pdt, ddt), release, env = _CASES[n]
    extra = list(release) if release else []
    if release and release[0] == "--prefill-sglang-version":
        extra += ["--decode-sglang-version", "0.5.23"]
    pair, dep = _both(tmp_path, pm, _flags(ptp, pp, pb, pdt), _flags(dtp, dp, db, ddt), *extra, decode_model=dm, d_env=env)
    _same(pair, dep)
    # The pair JSON contract (DESIGN.md Part 3) holds on the pair path.
    report = pair[3]
    assert set(report) >= {"verdict", "plan", "findings"} and "pairs" not in report
    assert {"path", "n_src", "n_dst", "segments"} <= set(report["plan"] or {"path": 0, "n_src": 0, "n_dst": 0, "segments": 0})


# --- options and environments mean the same on every path (issue 15) -------------------

def test_a_scripts_export_is_the_servers_environment_as_prefill_env_is(tmp_path):
    # `export VAR=v` before a launch is that server's environment (POSIX shell); the pair
    # path says the same with --prefill-env. Both fail: 0.5.23's NixlKVManager creates
    # only the backend SGLANG_DISAGGREGATION_NIXL_BACKEND names, and NOPE is none.
    pair, _ = _both(tmp_path, "llama-3.1-8b", NIXL, NIXL, "--sglang-version", "0.5.23",
                    p_env={"SGLANG_DISAGGREGATION_NIXL_BACKEND": "NOPE"})
    p_line, d_line = _line("llama-3.1-8b", "prefill", NIXL), _line("llama-3.1-8b", "decode", NIXL + " --port 30001")
    script = tmp_path / "export.sh"
    script.write_text(f"export SGLANG_DISAGGREGATION_NIXL_BACKEND=NOPE\n{p_line}\n"
                      f"unset SGLANG_DISAGGREGATION_NIXL_BACKEND\n{d_line}\n")
    rc, dep = _run("-f", str(script), "--sglang-version", "0.5.23")
    _same(pair, (rc, dep["verdict"], _ids(dep)))
    assert rc == 1 and "nixl-backend" in _ids(dep)


DSV3_BF16 = "--disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 --kv-cache-dtype bfloat16"


@pytest.mark.parametrize("gpus, rc", [
    (("--prefill-gpu", "h100"), 4),  # the decode's GPU not given: Hopper starts, Blackwell refuses
    (("--gpu", "h100"), 0),
    (("--prefill-gpu", "h100", "--decode-gpu", "b200"), 1),
    ((), 4),
])
def test_a_side_whose_gpu_is_not_given_is_decided_on_every_gpu_on_both_paths(tmp_path, gpus, rc):
    # DeepSeek-V3 on Blackwell defaults to trtllm_mla, whose start-up check
    # (_mla_kv_cache_dtype_checks, sglang/srt/arg_groups/overrides.py, 0.5.23) refuses the
    # spelling bfloat16: "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3,
    # bf16, or auto." On Hopper the decode starts. A verdict never rests on the assumed GPU.
    pair, dep = _both(tmp_path, "deepseek-v3", DSV3_BF16, DSV3_BF16, "--sglang-version", "0.5.23", *gpus)
    _same(pair, dep)
    assert pair[0] == rc, pair[3]["findings"]
    text = "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto."
    if rc == 4:
        window = pair[3]["release_window"]
        assert window["gpus_decided"] == ["h100", "b200"]
        outcomes = {o["verdict"]: o for o in window["outcomes"]}
        assert set(outcomes) == {"pass", "fail"} and text in outcomes["fail"]["headline"]
        assert "release-window" in pair[2] and "startup-gpu-dependent" not in pair[2]
    if rc == 1:
        assert any((f.get("runtime_error") or {}).get("message") == text for f in pair[3]["findings"])


SNAPSHOTS = REPO / "kvcheck" / "checks" / "examples" / "snapshots"


def _snapshot_pair(*extra: str) -> tuple[int, dict]:
    return _run("--prefill", str(SNAPSHOTS / "prefill.json"), "--decode", str(SNAPSHOTS / "decode.json"),
                "--model-config", str(model_dir("llama-3.1-8b") / "config.json"), *extra)


@pytest.mark.parametrize("gpus, expect", [
    (("--gpu", "b200"), {"prefill": ("b200", "--gpu"), "decode": ("b200", "--gpu")}),
    (("--decode-gpu", "b200"), {"prefill": ("h100/b200", "no GPU given: decided on each"), "decode": ("b200", "--gpu")}),
    ((), {"prefill": ("h100/b200", "no GPU given: decided on each"), "decode": ("h100/b200", "no GPU given: decided on each")}),
])
def test_gpu_options_reach_snapshot_sides_as_they_reach_files(tmp_path, gpus, expect):
    # once ignored for live servers and snapshots ("Hopper assumed" with --gpu b200)
    rc, report = _snapshot_pair(*gpus)
    assert rc == 0, report["findings"]
    got = {role: (g["gpu"], g["source"]) for role, g in report["gpu"].items()}
    assert got == expect
    # the same options on an -f script: each class on the GPU given, or decided on each
    case = tmp_path / "f"
    case.mkdir()
    (case / "deploy.sh").write_text(_line("llama-3.1-8b", "prefill", NIXL) + "\n"
                                    + _line("llama-3.1-8b", "decode", NIXL + " --port 30001") + "\n")
    rc_f, dep = _run("-f", str(case / "deploy.sh"), "--sglang-version", "0.5.23", *gpus)
    decided = dep["pairs"][0]["releases"].get("gpus_decided") or []
    for c in dep["classes"]:
        gpu, source = expect[c["role"]]
        if source == "--gpu":
            assert (c["gpu"], c["gpu_source"]) == (gpu, "--gpu")
        else:
            assert c["gpu_source"].startswith("default") and decided == ["h100", "b200"]


def test_a_servers_own_version_wins_over_sglang_version_and_the_disagreement_is_said():
    # /server_info's version is the code that runs (0.5.23 in these snapshots): the
    # option naming another release is set aside, with a warning naming both
    rc, report = _snapshot_pair("--gpu", "h100", "--sglang-version", "0.5.22")
    assert rc == 0
    assert {s["role"]: s["sglang_version"] for s in report["sides"]} == {"prefill": "0.5.23", "decode": "0.5.23"}
    warned = [f for f in report["findings"] if f["id"] == "release-clues-disagree"]
    assert len(warned) == 2 and all("0.5.22" in f["message"] and "0.5.23" in f["message"] for f in warned)
    rc, report = _snapshot_pair("--gpu", "h100", "--sglang-version", "0.5.23")
    assert rc == 0 and "release-clues-disagree" not in _ids(report)


def test_a_launch_line_files_variables_and_config_read_as_on_the_f_path(tmp_path):
    # A pair's launch-line file is a -f script of one line: `$PS` takes --env's value, and
    # unset it is unresolved-variable (it was parsed as the literal '$PS': a false
    # start-up refusal); a --config inside the image is config-not-read, read through
    # --config-file when given (it was bad input, exit 2).
    model = model_dir("llama-3.1-8b")
    p_line = f"{LAUNCH} --model-path {model} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size $PS"
    d_line = (f"{LAUNCH} --model-path {model} --disaggregation-mode decode --disaggregation-transfer-backend nixl "
              "--port 30001 --config /etc/sglang/decode.yaml")
    (tmp_path / "prefill.sh").write_text(p_line + "\n")
    (tmp_path / "decode.sh").write_text(d_line + "\n")
    (tmp_path / "deploy.sh").write_text(p_line + "\n" + d_line + "\n")
    (tmp_path / "v.env").write_text("PS=16\n")
    (tmp_path / "decode.yaml").write_text("page-size: 16\n")
    pair_args = ["--prefill", str(tmp_path / "prefill.sh"), "--decode", str(tmp_path / "decode.sh")]
    f_args = ["-f", str(tmp_path / "deploy.sh")]
    common = ["--sglang-version", "0.5.23", "--gpu", "h100"]
    copy = ["--config-file", f"/etc/sglang/decode.yaml={tmp_path / 'decode.yaml'}"]
    for extra, rc, must in (
        ([], 4, {"unresolved-variable", "config-not-read"}),
        (["--env", str(tmp_path / "v.env")], 4, {"config-not-read"}),
        (["--env", str(tmp_path / "v.env"), *copy], 0, set()),
    ):
        rc_p, pair = _run(*pair_args, *common, *extra)
        rc_f, dep = _run(*f_args, *common, *extra)
        assert (rc_p, pair["verdict"]) == (rc_f, dep["verdict"]) and rc_p == rc, (extra, _ids(pair), _ids(dep))
        assert must <= set(_ids(pair)) and must <= set(_ids(dep)) and "startup-argparse" not in _ids(pair)


def test_a_snapshots_hub_id_model_is_found_as_a_files_is():
    # the snapshot's model_path is a hub id: the catalog holds it, as for a file or -f
    # input (it needed --model-config on this path only)
    rc, report = _run("--prefill", str(SNAPSHOTS / "prefill.json"), "--decode", str(SNAPSHOTS / "decode.json"),
                      "--gpu", "h100")
    assert rc == 0 and report["plan"]["n_src"] == report["plan"]["n_dst"] == 64  # Llama-3.1-8B: 2 x 32 layers


@pytest.mark.parametrize("option", [["--probe"], ["--decode-agent", "127.0.0.1:1"], ["--bootstrap", "http://x:1"]])
def test_a_live_only_option_with_f_is_bad_usage_not_silently_dropped(tmp_path, option):
    (tmp_path / "deploy.sh").write_text(_line("llama-3.1-8b", "prefill", NIXL) + "\n"
                                        + _line("llama-3.1-8b", "decode", NIXL + " --port 30001") + "\n")
    res = CliRunner().invoke(app, ["preflight", "-f", str(tmp_path / "deploy.sh"), *option])
    # kvcheck's own usage error (kvcheck.cli.main makes it exit 2), raised before reading
    assert isinstance(res.exception, KvcheckError) and res.exception.exit_code == 2
    assert option[0] in str(res.exception)


@pytest.mark.parametrize("decode_env, rc, must", [
    ({}, 4, {"mooncake-protocol"}),  # TCP prefill, RDMA decode: the transports differ
    ({"MC_FORCE_TCP": "1"}, 0, set()),  # both TCP
])
def test_mooncake_tcp_is_mooncake_with_mc_force_tcp_on_every_spelling(tmp_path, decode_env, rc, must):
    # SGLang 0.5.23's handle_pd_disaggregation rewrites --disaggregation-transfer-backend
    # mooncake_tcp to mooncake with MC_FORCE_TCP=1 (os.environ.setdefault) before anything
    # else: one backend, one connector. It was "2 transfer backends" (one-backend,
    # backend-mismatch: "not a message the prefill's connector reads"), while the same
    # deployment spelled MC_FORCE_TCP=1 + mooncake passed.
    spelled = {}
    for name, p_flags, p_env in (("tcp", "--disaggregation-transfer-backend mooncake_tcp --page-size 16", None),
                                 ("env", "--page-size 16", {"MC_FORCE_TCP": "1"})):
        pair, dep = _both(tmp_path, "llama-3.1-8b", p_flags, "--page-size 16", "--sglang-version", "0.5.23",
                          p_env=p_env, d_env=decode_env or None, name=name)
        _same(pair, dep)
        spelled[name] = pair[:3]
        assert pair[0] == rc and must <= set(pair[2]), pair[3]["findings"]
        assert not {"one-backend", "backend-mismatch"} & set(pair[2])
    assert spelled["tcp"] == spelled["env"]


# --- the same generated deployments written in every input format (issue 15) ----------
# A pair's --config YAML and JSON args, a Kubernetes manifest and a docker-compose file with
# -f, beside the pair of launch-line files: one verdict, one set of finding ids, one exit
# status (json and junit). The image names no release (the --sglang-version decides), so no
# format carries a fact another lacks.
IMAGE = "registry.example.com/team/sglang-custom:dev"
_FORMAT_CASES = random.Random(1515).sample(list(itertools.product(
    [("llama-3.1-8b", {}), ("deepseek-v3", {"--tp-size": 8})],
    [{"--disaggregation-transfer-backend": "nixl"}, {}, {"--disaggregation-transfer-backend": "mori"}],
    [(16, 16), (16, 64), (None, None)],
    [(None, None), ("bfloat16", "bfloat16"), ("fp8_e4m3", None)],
    [(), ("--gpu", "b200"), ("--ignore", "page-size-mismatch")],
    [None, {"SGLANG_ENABLE_DISAGG_SAMPLING_MASK": "1"}],
)), 8)


def _server_args(model: str, role: str, flags: dict) -> list[str]:
    out = ["--model-path", str(model_dir(model)), "--disaggregation-mode", role]
    for k, v in flags.items():
        out += [k, str(v)]
    return out


@pytest.mark.parametrize("n", range(len(_FORMAT_CASES)))
def test_generated_deployments_agree_in_every_input_format(tmp_path, n):
    import shlex

    import yaml

    (model, base), backend, (pp, dp), (pdt, ddt), extra, p_env = _FORMAT_CASES[n]
    extra = ("--sglang-version", "0.5.23", *extra)
    sides = {}
    for role, page, dtype in (("prefill", pp, pdt), ("decode", dp, ddt)):
        flags = {**base, **backend, **({"--page-size": page} if page else {}), **({"--kv-cache-dtype": dtype} if dtype else {})}
        if role == "decode":
            flags["--port"] = 30001
        sides[role] = _server_args(model, role, flags)
    env_args = []
    if p_env:
        (tmp_path / "p.env").write_text("".join(f"{k}={v}\n" for k, v in p_env.items()))
        env_args = ["--prefill-env", str(tmp_path / "p.env")]

    def mapping(argv):
        return {argv[i][2:]: argv[i + 1] for i in range(0, len(argv), 2)}

    for role, argv in sides.items():
        (tmp_path / f"{role}.sh").write_text(f"{LAUNCH} {shlex.join(argv)}\n")
        (tmp_path / f"{role}.yaml").write_text(yaml.safe_dump(mapping(argv)))
        (tmp_path / f"{role}.json").write_text(json.dumps(mapping(argv)))
    docs = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": role},
             "spec": {"selector": {"matchLabels": {"app": role}}, "template": {"metadata": {"labels": {"app": role}},
                      "spec": {"containers": [{"name": role, "image": IMAGE,
                                               "command": ["python3", "-m", "sglang.launch_server", *argv]}]}}}}
            for role, argv in sides.items()]
    (tmp_path / "k8s.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump({"services": {
        role: {"image": IMAGE, "command": ["python3", "-m", "sglang.launch_server", *argv]} for role, argv in sides.items()}}))
    inputs = {ext: ["--prefill", str(tmp_path / f"prefill.{ext}"), "--decode", str(tmp_path / f"decode.{ext}")]
              for ext in ("sh", "yaml", "json")}
    inputs |= {"k8s": ["-f", str(tmp_path / "k8s.yaml")], "compose": ["-f", str(tmp_path / "compose.yaml")]}
    got = {}
    for name, args in inputs.items():
        rc, report = _run(*args, *env_args, *extra)
        got[name] = (rc, report["verdict"], _ids(report))
        junit = CliRunner().invoke(app, ["preflight", *args, *env_args, *extra, "--format", "junit"])
        assert junit.exit_code == rc and junit.stdout.lstrip().startswith("<?xml"), name
    assert len(set(map(repr, got.values()))) == 1, got
