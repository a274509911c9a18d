"""The release manifest and the release window (issue 14 "Release not pinned", "The
flags are evidence too"; issue 15 "One release manifest").

The flags each release accepts are that release's own argparse tables (the flag store);
the PD facts are each release's own code (``pd_facts.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcheck.cli import app
from kvcheck.release import manifest
from kvcheck.release.version import parse_version, unpacked_releases, version_key
from kvcheck.release.window import pair_candidates, side_window
from kvcheck.sglang.flags import FlagTable

REPO = Path(__file__).resolve().parent.parent


def test_one_version_order_everywhere():
    order = ["0.5.0rc2", "0.5.0", "0.5.0.post1", "0.5.1", "0.5.10", "0.5.10.post1", "0.5.23", "0.5.24"]
    assert sorted(reversed(order), key=version_key) == order
    from kvcheck.sglang import pd_release, releases

    for a, b in zip(order, order[1:]):
        assert releases.release_key(a) < releases.release_key(b)
        assert pd_release.at_least(b, a) and not pd_release.at_least(a, b)
        assert releases.in_range(a, None, b)
    assert str(parse_version("v0.5.8.post1")) == "0.5.8.post1" and parse_version("latest") is None


def test_the_newest_release_is_written_once():
    # Every module that needs the newest modeled release imports it from the manifest.
    hits = []
    for path in (REPO / "kvcheck").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"^[A-Z_]+ = \"" + re.escape(manifest.NEWEST) + "\"", line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line}")
    others = [h for h in hits if "FP4_VERIFIED_RELEASE" not in h and "STARTUP_VERIFIED_FROM" not in h]
    assert len(others) == 1 and others[0].startswith("kvcheck/release/manifest.py:"), others
    assert manifest.NEWEST == manifest.flag_releases()[-1]
    from kvcheck.sglang.pd_release import known_releases

    assert manifest.NEWEST == known_releases()[-1] == manifest.pd_releases()[-1]


def test_verified_per_subsystem_follows_each_releases_facts():
    from kvcheck.sglang.pd_release import behaviour

    for v in manifest.flag_releases():
        b = behaviour(v)
        assert manifest.verified("bootstrap", v) == b.bootstrap_modeled
        assert manifest.verified("decision", v) == b.decision_modeled
        assert manifest.verified("states", v) == b.states_modeled
    assert manifest.pd_releases()[0] == "0.5.5"
    for subsystem in manifest.SUBSYSTEMS:  # a release after the newest is verified for nothing
        assert not manifest.verified(subsystem, "0.5.24")


def test_every_release_bound_named_in_code_is_a_group_boundary():
    # A pair decided over a window is decided once per group of releases; a group never
    # spans a release from which some restated behaviour changes.
    pat = re.compile(r"(?:at_least|in_range|release_at_least)\([^)]*\)")
    lit = re.compile(r"\"(0\.5\.\d+(?:\.post\d+|rc\d+)?)\"")
    named = set()
    for path in (REPO / "kvcheck").rglob("*.py"):
        for call in pat.findall(path.read_text()):
            named |= set(lit.findall(call))
    named.discard("0.5.0rc2")
    assert named <= set(manifest.boundaries()), named - set(manifest.boundaries())


def test_a_release_after_the_newest_is_unchecked_in_start_up_too(tmp_path):
    from kvcheck.sglang.startup import ReleaseStop, release_gate
    from kvcheck.sources import build_side
    from kvcheck.sglang.releases import ReleaseChoice

    side = build_side("prefill", {"model_path": str(REPO / "configs/models/llama-3.1-8b"), "disaggregation_mode": "prefill"}, {}, "x",
                      release=ReleaseChoice("0.5.24", "--sglang-version", False, manifest.NEWEST))
    assert isinstance(release_gate(side), ReleaseStop)


def test_flags_narrow_the_window_by_each_releases_own_parser():
    # --cuda-graph-max-bs: a flag until 0.5.19; from 0.5.20 the parser finds it ambiguous.
    argv = ["--model-path", "m", "--cuda-graph-max-bs", "64"]

    def parse(v):
        return FlagTable.load(v).parse_argv(argv, "x")

    sr = side_window([], parse)
    assert sr.releases and sr.releases[-1] == "0.5.19" and not sr.pinned
    assert "0.5.20" in sr.refused_on and sr.refusal is None
    # Pinned to a release whose parser refuses it: that server's start-up refusal.
    from kvcheck.sources.release_clues import clue_from_cli

    pinned = side_window([clue_from_cli("0.5.23")], parse)
    assert pinned.releases == () and pinned.refusal[0] == "0.5.23" and "ambiguous" in str(pinned.refusal[1])


def test_both_sides_run_one_release_unless_clues_pin_them_apart():
    from kvcheck.release.window import SideRelease

    a = SideRelease(releases=("0.5.21", "0.5.22", "0.5.23"))
    b = SideRelease(releases=("0.5.22", "0.5.23"))
    assert pair_candidates(a, b) == [("0.5.22", "0.5.22"), ("0.5.23", "0.5.23")]
    pinned = SideRelease(releases=("0.5.21",), pinned=True)
    assert pair_candidates(pinned, a) == [("0.5.21", "0.5.21")]
    assert pair_candidates(pinned, b) == [("0.5.21", "0.5.22"), ("0.5.21", "0.5.23")]


def _run(*args):
    res = CliRunner().invoke(app, ["preflight", *args, "--format", "json"], catch_exceptions=False)
    return res.exit_code, json.loads(res.stdout)


def test_gpt_oss_tp1_into_tp4_with_no_release_named_never_passes(tmp_path):
    # llm-d #2433: a TP1 prefill into a TP4 decode of gpt-oss hung in production on a
    # release before the fix; the launch lines name no release.
    launch = "python -m sglang.launch_server --model-path openai/gpt-oss-120b --disaggregation-transfer-backend nixl --page-size 16"
    script = tmp_path / "run.sh"
    script.write_text(f"{launch} --disaggregation-mode prefill --tp-size 1\n{launch} --disaggregation-mode decode --tp-size 4 --port 30001\n")
    rc, report = _run("-f", str(script), "--gpu", "h100")
    assert rc in (1, 4), report["verdict"]
    pair = report["pairs"][0]
    window = pair["releases"]
    assert len(window["decided"]) > 1 and window["distinct_behaviours"] < len(window["decided"])
    assert window["prefill"]["pinned"] is False and "no clue" in window["prefill"]["how"]
    if rc == 4:
        f = next(f for f in pair["findings"] if f["id"] == "release-window")
        assert "fails on" in f["message"] and "--sglang-version" in f["fix"]
    # Pinned to the release where it is fixed, the same deployment is decided on it alone.
    rc23, pinned = _run("-f", str(script), "--sglang-version", "0.5.23", "--gpu", "h100")
    assert pinned["pairs"][0]["releases"]["decided"] == [{"prefill": "0.5.23", "decode": "0.5.23"}]
    assert rc23 != rc or rc23 == 1


def test_a_flag_older_releases_accept_is_decided_on_them_not_refused(tmp_path):
    launch = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-transfer-backend nixl "
              "--page-size 16 --cuda-graph-max-bs 64")
    script = tmp_path / "run.sh"
    script.write_text(f"{launch} --disaggregation-mode prefill\n{launch} --disaggregation-mode decode --port 30001\n")
    rc, report = _run("-f", str(script), "--gpu", "h100")
    assert rc != 2
    window = report["pairs"][0]["releases"]["prefill"]
    assert window["releases"][-1] == "0.5.19" and "0.5.20" in window["refused_on"]
    rc23, _ = _run("-f", str(script), "--sglang-version", "0.5.23", "--gpu", "h100")
    assert rc23 == 1  # 0.5.23's parser refuses the flag: a start-up refusal, not bad input


def test_no_gpu_given_decides_on_hopper_and_blackwell(tmp_path):
    from helpers import model_dir

    # The page size left to the attention backend the GPU picks: decided on both GPUs.
    launch = f"python -m sglang.launch_server --model-path {model_dir('llama-3.1-8b')} --disaggregation-transfer-backend nixl"
    script = tmp_path / "run.sh"
    script.write_text(f"{launch} --disaggregation-mode prefill\n{launch} --disaggregation-mode decode --port 30001\n")
    rc, report = _run("-f", str(script), "--sglang-version", "0.5.23")
    assert rc in (0, 4)
    assert report["pairs"][0]["releases"]["gpus_decided"] == ["h100", "b200"]
    pinned = tmp_path / "pinned.sh"
    pinned.write_text(script.read_text().replace("--disaggregation-mode", "--page-size 16 --disaggregation-mode"))
    rc, report = _run("-f", str(pinned), "--sglang-version", "0.5.23")
    # pinned page sizes leave other GPU choices (attention backends, KV dtype rules): still both
    assert rc == 0 and report["pairs"][0]["releases"]["gpus_decided"] == ["h100", "b200"]
    rc, report = _run("-f", str(script), "--sglang-version", "0.5.23", "--gpu", "b200")
    assert rc == 0 and report["pairs"][0]["releases"].get("gpus_decided") is None


# A window whose older release's parser refuses a flag's VALUE (here a tool-call parser
# choice added in 0.5.12) while the newer accepts it: the server exits at start-up on the
# one and starts on the other. Both are possible, so the pair is decided over both: it
# fails on every release when the releases it starts on fail too, and is unchecked when
# they pass (it fails or passes by the release). Written for kvcheck's tests in the
# srt-slurm shape: a dated nightly image (a build between 0.5.11 and 0.5.12).
NIGHTLY_RECIPE = """\
name: nightly-window
model:
  path: qwen3-8b
  container: lmsysorg/sglang:nightly-dev-cu13-20260510-2473659e
  precision: bf16
resources:
  gpu_type: h100
  gpus_per_node: 8
  prefill_nodes: 1
  prefill_workers: 1
  decode_nodes: 1
  decode_workers: 1
backend:
  type: sglang
  sglang_config:
    prefill:
      served-model-name: Qwen/Qwen3-8B
      model-path: /model/
      disaggregation-mode: prefill
      page-size: 16
      tool-call-parser: deepseekv4
    decode:
      served-model-name: Qwen/Qwen3-8B
      model-path: /model/
      disaggregation-mode: decode
      page-size: {decode_page}
      tool-call-parser: deepseekv4
"""


def _run_json(*args: str) -> tuple[int, dict]:
    from helpers import run_cli

    proc = run_cli(*args, "--format", "json", pin=False)
    return proc.returncode, json.loads(proc.stdout)


def _pair_findings(report: dict) -> list[dict]:
    return [f for p in report.get("pairs") or [] for f in p["findings"]] or report.get("findings", [])


def test_a_value_refused_by_part_of_the_window_is_decided_over_both(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(NIGHTLY_RECIPE.format(decode_page=64))
    code, report = _run_json("preflight", "-f", str(recipe))
    found = _pair_findings(report)
    assert code == 1 and report["pairs"][0]["verdict"] == "fail", [(f["id"], f["severity"]) for f in found]
    refused = [f for f in found if f["id"] == "startup-argparse"]
    assert {f["severity"] for f in refused} == {"error"} and len(refused) == 2
    assert sorted(f["message"].split(": ", 2)[1].split(":")[0] for f in refused) == ["nightly-window/decode_0", "nightly-window/prefill_0"]
    assert all("on SGLang 0.5.11 only" in f["message"] and "invalid choice: 'deepseekv4'" in f["message"] for f in refused)
    assert any(f["id"] == "page-size-mismatch" and "on SGLang 0.5.12 only" in f["message"] for f in found)
    window = report["pairs"][0]["releases"]
    assert {o["verdict"] for o in window["outcomes"]} == {"fail"}
    assert window["prefill"]["refuses_to_start_on"] == ["0.5.11"] and window["prefill"]["releases"] == ["0.5.12"]
    # the newer end of the window starts: SGLang's own parser (0.5.23, installed) reads the value
    pytest.importorskip("sglang.srt.server_args")
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--model-path", "Qwen/Qwen3-8B", "--tool-call-parser", "deepseekv4"])
    assert args.tool_call_parser == "deepseekv4"


def test_a_value_refused_by_part_of_the_window_is_unchecked_when_the_rest_passes(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(NIGHTLY_RECIPE.format(decode_page=16))
    code, report = _run_json("preflight", "-f", str(recipe))
    found = _pair_findings(report)
    assert code == 4 and report["pairs"][0]["verdict"] == "unchecked"
    (window,) = [f for f in found if f["id"] == "release-window"]
    assert "fails on 0.5.11: startup-argparse: argument --tool-call-parser: invalid choice: 'deepseekv4'" in window["message"]
    assert "passes on 0.5.12" in window["message"]


def test_the_pair_path_decides_a_partly_refused_value_the_same(tmp_path):
    for role, page in (("prefill", 16), ("decode", 64)):
        (tmp_path / f"{role}.sh").write_text(
            f"python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode {role} "
            f"--page-size {page} --tool-call-parser deepseekv4 --gpu-id-step 1\n"
        )
    code, report = _run_json(
        "preflight", "--prefill", str(tmp_path / "prefill.sh"), "--decode", str(tmp_path / "decode.sh"), "--gpu", "h100"
    )
    ids = {f["id"] for f in report["findings"]}
    # no clue to the release: every modeled release, refused up to 0.5.11, fails from 0.5.12
    assert code == 1 and report["verdict"] == "fail" and {"startup-argparse", "page-size-mismatch"} <= ids, ids


# An open pip range (``sglang[all]>=0.5.9``) allows the releases after the newest modeled
# one too: a pair that passes on every modeled release in the range is not judged on those,
# so it is unchecked; one that fails on every modeled release fails; a bounded range passes.
PIP_SCRIPT = """\
pip install "sglang[all]{spec}"
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --page-size 16 &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --page-size {decode_page}
"""


@pytest.mark.parametrize(
    ("spec", "decode_page", "code", "verdict"),
    [(">=0.5.9", 16, 4, "unchecked"), (">=0.5.9", 64, 1, "fail"), (">=0.5.9,<0.5.20", 16, 0, "pass")],
)
def test_an_open_pip_range_never_passes_on_the_modeled_releases_alone(tmp_path, spec, decode_page, code, verdict):
    script = tmp_path / "pd.sh"
    script.write_text(PIP_SCRIPT.format(spec=spec, decode_page=decode_page))
    got, report = _run_json("preflight", "-f", str(script), "--gpu", "h100")
    assert (got, report["pairs"][0]["verdict"]) == (code, verdict), [(f["id"], f["severity"]) for f in _pair_findings(report)]
    open_above = [f for f in _pair_findings(report) if f["id"] == "release-window" and "newer than" in f["message"]]
    assert len(open_above) == (1 if verdict == "unchecked" else 0)
    if open_above:
        assert "pip install sglang[all]>=0.5.9 (the prefill and decode)" in open_above[0]["message"]
        assert f"newer than {manifest.NEWEST}" in open_above[0]["message"] and "--sglang-version" in open_above[0]["fix"]


def test_the_generators_read_only_folders_named_by_a_release(tmp_path):
    """``scripts/gen_*`` list a tree of unpacked wheels with ``unpacked_releases``: PyPI's
    order (rc before the release, post after it), from a first release on, and a folder that
    is not named by a release number (a wheel unpacked as ``0513``) is not a release."""
    for name in ("0.5.10", "0.5.9", "0.5.0rc2", "0.5.0", "0.5.0.post1", "0513", "notes"):
        (tmp_path / name / "sglang").mkdir(parents=True)
    (tmp_path / "0.5.11").mkdir()  # no sglang/ in it: not unpacked
    assert unpacked_releases(tmp_path) == ["0.5.0rc2", "0.5.0", "0.5.0.post1", "0.5.9", "0.5.10"]
    assert unpacked_releases(tmp_path, "0.5.1") == ["0.5.9", "0.5.10"]
