"""Kinds of fault found on published deployments (issue 14), one test each, on example
files written for these tests in the published shapes (tests/data/deployments/shapes/).

* A release's ``DeprecatedAction`` modeled as it runs: 0.5.5-0.5.7 raise ``ValueError``,
  0.5.8-0.5.17 only warn, 0.5.18+ call ``parser.error`` when the flag has an error
  message. Driven on each installed release's own parser (18 srt-slurm recipes on
  ``lmsysorg/sglang:v0.5.8`` with ``--prefill-round-robin-balance`` were false fails).
* Flags of a release older than kvcheck's tables (``--enable-deepep-moe``, 0.4.x): the
  side runs a release kvcheck does not model (``unknown-release``), not a refusal; a
  refusal that holds whatever the release (a typo, a stray word) stays a fail, and says so.
* A JSON pair side's value the parser refuses is the server's start-up refusal (exit 1),
  as in a YAML ``--config`` or a launch line.
* ``kvcheck explain`` never takes its release from the SGLang installed where it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcheck.cli import app
from kvcheck.cluster import ClusterOptions, check_deployments
from kvcheck.sglang.flags import FlagTable
from kvcheck.sources.deployments import read_deployments

REPO = Path(__file__).resolve().parent.parent
SHAPES = Path(__file__).parent / "data" / "deployments" / "shapes"
ROOT = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))


def _contract(path: Path, **opts) -> dict:
    deps = read_deployments([path], env={})
    report = check_deployments(deps, ClusterOptions(**opts))
    out = report.contract()
    return out


def _findings(contract: dict) -> list[dict]:
    out = list(contract.get("findings") or [])
    for group in ("classes", "pairs"):
        for item in contract.get(group) or []:
            out += list(item.get("findings") or [])
    return out


def _ids(contract: dict, severity: str) -> set[str]:
    return {f["id"] for f in _findings(contract) if f["severity"] == severity}


# -- DeprecatedAction, per release ------------------------------------------------------

_DRIVE = r"""
import argparse, contextlib, io, json, logging, sys
logging.disable(logging.CRITICAL)
from startup_worker import install_kernel_stubs  # as the start-up worker imports a release
install_kernel_stubs()
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = {}
for a in parser._actions:
    if type(a).__name__ != "DeprecatedAction":
        continue
    opt = a.option_strings[0]
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            parser.parse_args(["--model-path", "m", opt])
            out[opt] = "starts"
        except BaseException:
            out[opt] = "refused"
print(json.dumps(out))
"""


def _release_env(release: str) -> dict[str, str] | None:
    env = dict(os.environ)
    if release == "0.5.23":
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")])
        return env
    if not (ROOT / release / "sglang").is_dir():
        return None
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / release), str(ROOT / "_deps"), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")])
    return env


@pytest.mark.parametrize("release", ["0.5.7", "0.5.8", "0.5.17"])
def test_a_deprecated_flag_is_refused_or_accepted_as_that_releases_own_parser_does(release):
    env = _release_env(release)
    if env is None:
        pytest.skip(f"SGLang {release} is not installed side by side ({ROOT})")
    proc = subprocess.run([sys.executable, "-c", _DRIVE], env=env, capture_output=True, text=True, timeout=240, cwd=str(ROOT if release != "0.5.23" else REPO))
    assert proc.returncode == 0, proc.stderr[-2000:]
    runtime = json.loads(proc.stdout.strip().splitlines()[-1])
    table = FlagTable.load(release)
    for opt, outcome in runtime.items():
        flag = table.get(opt)
        assert flag is not None, opt
        assert flag.action == ("deprecated" if outcome == "refused" else "deprecated_warn"), (release, opt, outcome, flag.action)
        argv = ["--model-path", "m", opt]
        if outcome == "starts":
            table.parse_argv(argv)  # no refusal
        else:
            with pytest.raises(Exception, match="retired flag"):
                table.parse_argv(argv)
    if release == "0.5.8":
        assert runtime.get("--prefill-round-robin-balance") == "starts"


def test_a_recipe_on_0_5_8_with_a_flag_0_5_8_deprecates_is_decided_not_refused():
    c = _contract(SHAPES / "srt-deprecated-flag-0.5.8.yaml")
    assert "startup-argparse" not in _ids(c, "error")
    assert c["exit_code"] in (0, 4) and c["verdict"] != "fail"


# -- flags of an older release ------------------------------------------------------------


def test_flags_of_an_older_release_are_that_release_not_a_refusal():
    # Dynamo SDK graph config of mid 2025: no image, --enable-deepep-moe refused by every
    # release whose PD path kvcheck models, read by 0.5.0rc2-0.5.2's own tables.
    c = _contract(SHAPES / "dynamo-sdk-graph-0.4-flags.yaml")
    assert c["exit_code"] == 4 and "startup-argparse" not in _ids(c, "error")
    unknown = [f for f in _findings(c) if f["id"] == "unknown-release"]
    assert {f["line"] for f in unknown} == {10, 23}
    assert all("releases whose PD path kvcheck does not model" in f["message"] for f in unknown)


def test_a_pinned_0_4_release_whose_option_names_take_the_flag_is_unchecked_one_that_lacks_it_fails(tmp_path):
    # --enable-flashinfer-moe: registered by SGLang 0.4.8 .. 0.4.9.post4 only (their wheels'
    # server_args.py; kvcheck/release/older_flags.json), by no release kvcheck has tables for.
    c = _contract(SHAPES / "older-image-flags.sh")
    assert c["exit_code"] == 4 and "startup-argparse" not in _ids(c, "error")
    unknown = [f for f in _findings(c) if f["id"] == "unknown-release" and "registers every flag" in f["message"]]
    assert unknown and unknown[0]["line"] == 6
    later = tmp_path / "older-image-flags.sh"
    later.write_text((SHAPES / "older-image-flags.sh").read_text().replace("0.4.9.post3", "0.4.10"))
    c = _contract(later)  # 0.4.10 no longer registers it: the server refuses it
    assert c["exit_code"] == 1 and "startup-argparse" in _ids(c, "error")


def test_refusals_that_hold_whatever_the_release_fail_and_say_so():
    c = _contract(SHAPES / "older-image-typo.sh")
    assert c["exit_code"] == 1
    refused = [f for f in _findings(c) if f["id"] == "startup-argparse"]
    assert {f["line"] for f in refused} == {6, 7}  # the typo at its own line; the stray word at its launch line
    texts = " ".join(f["runtime_error"]["message"] for f in refused)
    assert "--page-sise" in texts and "unrecognized arguments: --tp-size" not in texts
    assert all("does not depend on the release" in f["message"] for f in refused)
    assert not any("every release it may run" in f["message"] for f in refused)


def test_an_image_that_names_no_release_is_unchecked_on_a_flag_name_and_fails_on_a_missing_value(tmp_path):
    base = ("services:\n  prefill:\n    image: myreg.io/team/sglang-pd:my-tag\n    command: python3 -m sglang.launch_server "
            "--model-path Qwen/Qwen3-8B --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 {extra}\n"
            "  decode:\n    image: myreg.io/team/sglang-pd:my-tag\n    command: python3 -m sglang.launch_server "
            "--model-path Qwen/Qwen3-8B --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001\n")
    newer = tmp_path / "newer" / "compose.yaml"
    newer.parent.mkdir()
    newer.write_text(base.format(extra="--a-flag-a-newer-release-adds 1"))
    c = _contract(newer)  # the tag may run a release newer than kvcheck's tables
    assert c["exit_code"] == 4 and "startup-argparse" not in _ids(c, "error")
    assert any("may have added it" in f["message"] for f in _findings(c) if f["id"] == "unknown-release")
    broken = tmp_path / "broken" / "compose.yaml"
    broken.parent.mkdir()
    broken.write_text(base.format(extra="--disaggregation-bootstrap-port --port 30000"))
    c = _contract(broken)  # "expected one argument" on every release: refused
    assert c["exit_code"] == 1
    assert any("expected one argument" in f["runtime_error"]["message"] for f in _findings(c) if f["id"] == "startup-argparse")


def test_the_older_flag_table_reads_releases_as_their_parsers_do():
    # the reading (add_argument literals, --no-X for BooleanOptionalAction) against a
    # release's table that gen_flags.py took from its own parser
    sys.path.insert(0, str(REPO / "scripts"))
    import gen_older_flags

    for release in ("0.5.5", "0.5.12"):
        src = ROOT / release / "sglang" / "srt" / "server_args.py"
        if not src.is_file():
            continue
        assert gen_older_flags.check_method(release, src) is None
    from kvcheck.release import older

    assert older.accepting(["--enable-deepep-moe", "--tp-size", "--disaggregation-mode"])[0] == "0.4.4.post2"
    assert older.accepting(["--page-sise"]) == []


# -- the JSON pair side ---------------------------------------------------------------------


def _run(*args: str) -> tuple[int, dict | None, str]:
    res = CliRunner().invoke(app, ["preflight", *args, "--format", "json"], catch_exceptions=False)
    try:
        return res.exit_code, json.loads(res.stdout), res.output
    except ValueError:
        return res.exit_code, None, res.output


def test_a_json_side_value_the_parser_refuses_is_that_servers_start_up_refusal(tmp_path):
    model = str(REPO / "configs" / "models" / "llama-3.1-8b")
    base = {"model-path": model, "disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl"}
    (tmp_path / "prefill.json").write_text(json.dumps({**base, "page-size": "abc"}))
    (tmp_path / "prefill.yaml").write_text("".join(f"{k}: {v}\n" for k, v in {**base, "page-size": "abc"}.items()))
    (tmp_path / "decode.json").write_text(json.dumps({**base, "disaggregation-mode": "decode", "page-size": 16, "port": 30001}))
    got = {}
    for side in ("prefill.json", "prefill.yaml"):
        rc, report, out = _run("--prefill", str(tmp_path / side), "--decode", str(tmp_path / "decode.json"), "--sglang-version", "0.5.23")
        assert rc == 1, out
        f = next(f for f in report["findings"] if f["id"] == "startup-argparse")
        got[side] = f["runtime_error"]["message"]
    assert got["prefill.json"] == got["prefill.yaml"] == "argument --page-size: invalid int value: 'abc'"
    # the object's own shape is kvcheck's input: a flag given twice is exit 2
    (tmp_path / "twice.json").write_text(json.dumps({**base, "page-size": 16, "page_size": 16}))
    from helpers import run_cli

    proc = run_cli("preflight", "--prefill", str(tmp_path / "twice.json"), "--decode", str(tmp_path / "decode.json"), "--sglang-version", "0.5.23")
    assert proc.returncode == 2 and "given twice" in proc.stderr


# -- explain's release ------------------------------------------------------------------------


def test_explain_never_takes_the_release_of_the_sglang_installed_here(monkeypatch):
    from kvcheck.explain.releases import choose_explain_release, load_message_releases
    from kvcheck.sglang import releases

    monkeypatch.setattr(releases, "installed_release", lambda: "0.5.9")
    release, where = choose_explain_release(None, None)
    assert release == load_message_releases()["releases"][-1] != "0.5.9"
    assert where.startswith("assumed")
    assert choose_explain_release("0.5.12", None) == ("0.5.12", "the version the log shows")


# -- the model, the same on every release of a window -------------------------------------------


def test_the_model_named_by_the_file_is_the_same_on_every_release_of_the_window():
    # --model-path /model on both, the model named by --served-model-name; the decode's
    # flags end its window at 0.5.19. The served name was set on each side's newest
    # release only, so on 0.5.19 the sides differed in --model-path: same-model unchecked.
    c = _contract(SHAPES / "served-name-window.sh")
    assert "same-model" not in _ids(c, "unchecked") and "release-window" not in _ids(c, "unchecked")
    assert c["exit_code"] == 0


def test_a_vendor_image_whose_tag_names_the_sglang_it_carries_is_read():
    from kvcheck.sources.release_clues import clue_from_image

    c = clue_from_image("registry.example.com/team/docker-temp:0.3.4.post2-sglang0.4.10.post2-pytorch2.7.1-cuda12.8.1")
    assert (c.named, c.releases) == ("0.4.10.post2", ())  # named, not modeled: unknown-release
    assert clue_from_image("registry.example.com/inference:vllm0.9-sglang-v0.5.9-cu129").releases == ("0.5.9",)
    assert clue_from_image("registry.example.com/inference:sglang-v0.5.9-dev").releases == ()
    assert clue_from_image("nginx:1.27").named is None
