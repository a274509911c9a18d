"""Every SGLang release from 0.5.0rc2 to 0.5.23: flags, --config, release of each side,
unknown releases, known issues, explain by release.

Expected values come from each release's own code: the flag tables were generated from
each release's parser by ``scripts/gen_flags.py`` (which also drove each release's own
``ConfigArgumentMerger`` on every key to pick the merger variant); cited lines are in the
released wheels (``pip download --no-deps sglang==X``). Tests that drive the installed
SGLang (0.5.23) are marked ``runtime``.
"""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from helpers import model_dir, run_cli, write_config
from kvcheck.errors import InputError
from kvcheck.sglang.flags import FlagTable, modeled_releases
from kvcheck.sglang.releases import choose_release, parse_release, release_from_image, release_key

PREFILL = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16}
DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}

# Every final release on PyPI from 0.5.1 to 0.5.23 (0.5.0 was never published as a final
# release; its last candidate 0.5.0rc2 is modeled instead).
PYPI_RELEASES = [
    "0.5.0rc2", "0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2", "0.5.3", "0.5.3.post1", "0.5.3.post2",
    "0.5.3.post3", "0.5.4", "0.5.4.post1", "0.5.4.post2", "0.5.4.post3", "0.5.5", "0.5.5.post1", "0.5.5.post2",
    "0.5.5.post3", "0.5.6", "0.5.6.post1", "0.5.6.post2", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9", "0.5.10",
    "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1",
    "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
]


def test_every_release_is_modeled_in_order():
    assert list(modeled_releases()) == PYPI_RELEASES
    assert sorted(PYPI_RELEASES, key=release_key) == PYPI_RELEASES


@pytest.mark.parametrize("version", PYPI_RELEASES)
def test_each_table_loads(version):
    t = FlagTable.load(version)
    assert t.version == version and t.meta["sglang_version"] == version
    assert len(t) == t.meta["count"]["actions"]
    assert len(t.option_strings) == t.meta["count"]["option_strings"]
    assert "model_path" in t.dests and t.get("--model-path").required


def test_table_sizes_grow_with_the_parser():
    # argparse actions of each release's parser (generator output, -h included)
    assert FlagTable.load("0.5.0rc2").meta["count"]["actions"] == 192
    assert FlagTable.load("0.5.8").meta["count"]["actions"] == 329
    assert FlagTable.load("0.5.23").meta["count"]["actions"] == 532


# ---------------------------------------------------------------------------------------
# a 0.5.8-era launch line
# ---------------------------------------------------------------------------------------

OLD_LINE = ["--model-path", "m", "--cuda-graph-max-bs", "256", "--tp", "2"]


def test_cuda_graph_max_bs_exists_until_0_5_19():
    # an option string from 0.5.0rc2 to 0.5.19 (its own flag, then an alias of
    # --cuda-graph-max-bs-decode); gone from 0.5.20 on.
    present = [v for v in PYPI_RELEASES if FlagTable.load(v).get("--cuda-graph-max-bs") is not None]
    assert present == PYPI_RELEASES[: PYPI_RELEASES.index("0.5.19") + 1]


def test_0_5_8_line_accepted_by_0_5_8_and_refused_by_0_5_23():
    # 0.5.8 registers "--tensor-parallel-size", "--tp-size" with dest tensor_parallel_size
    # and ServerArgs.from_cli_args sets args.tp_size = args.tensor_parallel_size
    t = FlagTable.load("0.5.8")
    args = t.parse_argv(OLD_LINE)
    assert args == {"model_path": "m", "cuda_graph_max_bs": 256, "tensor_parallel_size": 2}
    assert t.to_fields(args)["tp_size"] == 2
    # 0.5.23 has --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill: argparse's
    # prefix matching finds two options
    with pytest.raises(InputError) as exc:
        FlagTable.load("0.5.23").parse_argv(OLD_LINE)
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" in str(exc.value)
    # 0.5.19 keeps --cuda-graph-max-bs as an alias of --cuda-graph-max-bs-decode
    assert FlagTable.load("0.5.19").parse_argv(OLD_LINE)["cuda_graph_max_bs_decode"] == 256


def test_cli_sglang_version_reads_the_line_with_that_release(tmp_path):
    line = tmp_path / "prefill.sh"
    line.write_text(
        f"python -m sglang.launch_server --model-path {model_dir('llama-3.1-8b')} --disaggregation-mode prefill "
        "--disaggregation-transfer-backend nixl --page-size 16 --cuda-graph-max-bs 256\n"
    )
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    ok = run_cli("preflight", "--prefill", str(line), "--decode", str(d), "--format", "json", "--sglang-version", "0.5.8")
    assert ok.returncode in (0, 1, 4), ok.stderr  # 4: a PD part the per-release model leaves unchecked
    report = json.loads(ok.stdout)
    assert report["runtime"] == "sglang 0.5.8"
    assert report["sides"][0]["sglang_version"] == "0.5.8" and report["sides"][0]["version_source"] == "--sglang-version"
    # removed in 0.5.20: 0.5.23's argparse refuses the abbreviation, so that prefill exits at
    # start-up (an error finding with argparse's text, exit 1), not bad input (exit 2)
    bad = run_cli("preflight", "--prefill", str(line), "--decode", str(d), "--sglang-version", "0.5.23", "--format", "json")
    assert bad.returncode == 1, bad.stderr
    refused = [f for f in json.loads(bad.stdout)["findings"] if f["id"] == "startup-argparse"]
    assert len(refused) == 1 and refused[0]["runtime_error"]["message"].startswith("ambiguous option: --cuda-graph-max-bs could match")
    mixed = run_cli("preflight", "--prefill", str(line), "--decode", str(d), "--format", "json",
                    "--prefill-sglang-version", "0.5.8", "--decode-sglang-version", "0.5.23")
    assert json.loads(mixed.stdout)["runtime"] == "sglang 0.5.8 (prefill) / 0.5.23 (decode)"


def test_retired_flag_is_refused_or_warned_as_that_release_does():
    # --prefill-round-robin-balance is a DeprecatedAction (nargs=0) from 0.5.8 on. Its
    # __call__ raised ValueError(self.help) up to 0.5.7 (0.5.3-0.5.4: --enable-ep-moe);
    # from 0.5.8 it only logs print_deprecated_warning and the server starts
    # (server_args.py / arg_groups/argparse_actions.py, class DeprecatedAction).
    # tests/test_corpus_kinds.py drives each installed release's own parser for this.
    f = FlagTable.load("0.5.8").get("--prefill-round-robin-balance")
    assert f.action == "deprecated_warn"
    args = FlagTable.load("0.5.8").parse_argv(["--model-path", "m", "--prefill-round-robin-balance"])
    assert "prefill_round_robin_balance" not in args
    assert FlagTable.load("0.5.7").get("--prefill-round-robin-balance").action == "store_true"
    with pytest.raises(InputError, match="refuses this retired flag"):
        FlagTable.load("0.5.4").parse_argv(["--model-path", "m", "--enable-ep-moe"])


# ---------------------------------------------------------------------------------------
# --config YAML per release
# ---------------------------------------------------------------------------------------


def test_config_merger_variants_by_release():
    # picked by gen_flags.py from each release's own ConfigArgumentMerger
    merger = {v: FlagTable.load(v).config_merger for v in PYPI_RELEASES}
    assert merger["0.5.2"] == "none" and merger["0.5.3"] == "v0.5.3" and merger["0.5.7"] == "v0.5.3"
    assert merger["0.5.8"] == "v0.5.8" and merger["0.5.13.post1"] == "v0.5.8"
    assert merger["0.5.14"] == "v0.5.14" and merger["0.5.22"] == "v0.5.14" and merger["0.5.23"] == "v0.5.23"


@pytest.mark.parametrize("version", ["0.5.3", "0.5.5", "0.5.8", "0.5.13.post1", "0.5.18", "0.5.21"])
def test_enable_dp_attention_in_config_accepted_before_0_5_22(version):
    # a plain store_true flag up to 0.5.21: the merger turns `true` into the bare flag
    t = FlagTable.load(version)
    got = t.to_fields(t.parse_config({"enable-dp-attention": True, "dp-size": 2}))
    assert got["enable_dp_attention"] is True and got["dp_size"] == 2


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
def test_enable_dp_attention_in_config_refused_from_0_5_22(version):
    # 0.5.22: --enable-dp-attention became a DeprecatedStoreTrueAction, which is neither
    # _StoreTrueAction nor _StoreAction: ConfigArgumentMerger lists it as unsupported
    assert FlagTable.load(version).get("--enable-dp-attention").action == "deprecated_store_true"
    with pytest.raises(InputError, match="Unsupported config option 'enable_dp_attention' with action 'DeprecatedStoreTrueAction'"):
        FlagTable.load(version).parse_config({"enable-dp-attention": True})


def test_no_config_before_0_5_3():
    with pytest.raises(InputError, match="has no --config option"):
        FlagTable.load("0.5.2").parse_config({"tp-size": 2})


def test_dict_values_json_from_0_5_14():
    # ConfigArgumentMerger._convert_config_to_args: `elif isinstance(value, dict)` added in 0.5.14
    assert FlagTable.load("0.5.13").config_to_argv({"json-model-override-args": {"a": 1}}) == ["--json-model-override-args", "{'a': 1}"]
    assert FlagTable.load("0.5.14").config_to_argv({"json-model-override-args": {"a": 1}}) == ["--json-model-override-args", '{"a": 1}']


# ---------------------------------------------------------------------------------------
# release of each side
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image,release",
    [
        ("lmsysorg/sglang:v0.5.8.post1", "0.5.8.post1"),
        ("lmsysorg/sglang:v0.5.8.post1-cu126", "0.5.8.post1"),
        ("lmsysorg/sglang:v0.5.5.post3-cu129-amd64", "0.5.5.post3"),
        ("docker.io/lmsysorg/sglang:v0.5.9-cu124@sha256:0123", "0.5.9"),
        ("lmsysorg/sglang:v0.5.12.post1-cu130-runtime", "0.5.12.post1"),
        ("lmsysorg/sglang:latest", None),
        ("lmsysorg/sglang", None),
        ("lmsysorg/sglang:dev", None),
        ("lmsysorg/sglang:nightly-dev-20260301-1a2b3c4d", None),
        ("lmsysorg/sglang:v0.5.9-dev-cu129", None),
        ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1", "0.5.14"),  # ai-dynamo 1.3.1: sglang[diffusion]==0.5.14
        ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.8.1", "0.5.6.post2"),
        ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:9.0.0", None),
        ("vllm/vllm-openai:v0.10.0", None),
    ],
)
def test_release_from_image(image, release):
    got, reason = release_from_image(image)
    assert got == release, reason
    assert reason


def test_parse_release():
    assert parse_release("v0.5.9") == "0.5.9" and parse_release("0.5.0rc2") == "0.5.0rc2"
    assert parse_release("latest") is None and parse_release("0.5.9.dev3+g1a2b") is None


def test_choose_release_order(monkeypatch):
    assert choose_release("0.5.8", "image tag x", "0.5.23") == choose_release("0.5.8", "image tag x")
    c = choose_release("0.4.9", "image tag x", "0.5.8")  # unmodeled input yields to a known version
    assert (c.release, c.source, c.modeled) == ("0.5.8", "--sglang-version", True)
    c = choose_release(None, None, None, input_unknown="image tag latest names no release")
    assert c.release is None and not c.modeled
    c = choose_release(None, None, "0.6.0")
    assert c.release == "0.6.0" and not c.modeled and c.table == "0.5.23"


def test_installed_release_detection(monkeypatch):
    from kvcheck.sglang import releases

    try:
        installed = metadata.version("sglang")  # what pip reports
    except metadata.PackageNotFoundError:
        installed = None
    assert releases.installed_release() == installed  # read from the dist-info name, no import
    # Issue 14: the SGLang installed where kvcheck runs is never a side's release, and
    # neither is the newest modeled one: with no clue the release is unknown.
    c = choose_release()
    assert c.release is None and not c.modeled and "no release named" in c.source
    monkeypatch.setattr(releases, "installed_version", lambda dist: None)
    assert choose_release() == c


def test_unknown_release_is_unchecked_exit_4(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    for version in ("0.4.9", "0.6.0"):
        proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--sglang-version", version)
        assert proc.returncode == 4, proc.stderr
        report = json.loads(proc.stdout)
        assert report["verdict"] == "unchecked"
        ids = [f["id"] for f in report["findings"] if f["severity"] == "unchecked"]
        assert ids.count("unknown-release") == 2
    # a known version on one side leaves the other unknown side unchecked
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", "0.6.0", "--prefill-sglang-version", "0.5.23")
    assert proc.returncode == 4


def test_the_release_key_in_yaml_names_the_release_and_sglang_version_wins_over_it(tmp_path):
    # Issue 14: --sglang-version (the user's explicit pin) wins over what the input says,
    # and the disagreement is said. (Before the release window the file's key won.)
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "kvcheck-sglang-version": "0.5.8", "cuda-graph-max-bs": 128})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {**DECODE, "kvcheck-sglang-version": "0.5.8"})
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json")
    assert proc.returncode in (0, 1, 4), proc.stderr
    report = json.loads(proc.stdout)
    assert [s["version_source"] for s in report["sides"]] == [f"kvcheck-sglang-version 0.5.8 in {p}", f"kvcheck-sglang-version 0.5.8 in {d}"]
    assert report["release_window"]["decided"] == [{"prefill": "0.5.8", "decode": "0.5.8"}]
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--sglang-version", "0.5.23")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1  # 0.5.23's parser finds --cuda-graph-max-bs ambiguous: the prefill refuses to start
    ids = {f["id"] for f in report["findings"]}
    assert {"startup-argparse", "release-clues-disagree"} <= ids


def test_defaults_follow_the_release():
    from kvcheck.sources import release_defaults

    # every release in the store has a default transfer backend; a release whose argparse
    # default differs from 0.5.23's gets its own in the typed args
    for v in PYPI_RELEASES:
        own = FlagTable.load(v).defaults()
        merged = release_defaults({}, v)
        for k, val in merged.items():
            assert own[k] == val


# ---------------------------------------------------------------------------------------
# known issues
# ---------------------------------------------------------------------------------------


def _known(tmp_path, version, prefill_extra=None, env=None):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, **(prefill_extra or {})})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    args = ["preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--sglang-version", version]
    if env:
        e = tmp_path / "p.env"
        e.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        args += ["--prefill-env", str(e), "--decode-env", str(e)]  # both servers run one image
    proc = run_cli(*args)
    return proc.returncode, [f for f in json.loads(proc.stdout)["findings"] if f["id"] == "known-issue"]


def test_known_issue_0_5_12_nixl_dense_hang(tmp_path):
    rc, found = _known(tmp_path, "0.5.12")
    hits = [f for f in found if "sglang-0.5.12-nixl-dense-hang" in f["message"]]
    assert rc == 1 and hits and hits[0]["severity"] == "error"
    assert "fixed in SGLang 0.5.12.post1" in hits[0]["message"] and "sgl-project/sglang/pull/25699" in hits[0]["message"]
    _, found = _known(tmp_path, "0.5.12.post1")
    assert not [f for f in found if "0.5.12-nixl-dense-hang" in f["message"]]


def test_known_issue_ucx_progress_thread_cuda_copy(tmp_path):
    _, found = _known(tmp_path, "0.5.23", env={"UCX_TLS": "rc,cuda_copy,cuda_ipc", "NIXL_VERSION": "1.3.0"})
    hits = [f for f in found if "nixl-ucx-progress-thread-cuda-copy" in f["message"]]
    assert hits and hits[0]["severity"] == "error" and "ai-dynamo/nixl/issues/2102" in hits[0]["message"]
    _, found = _known(tmp_path, "0.5.23", env={"UCX_TLS": "rc,cuda_ipc", "NIXL_VERSION": "1.3.0"})
    assert not [f for f in found if "progress-thread" in f["message"]]


def test_known_issue_nixl_too_old_for_0_5_15(tmp_path):
    # 0.5.15 nixl/conn.py: from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t
    _, found = _known(tmp_path, "0.5.15", env={"NIXL_VERSION": "1.0.1"})
    assert [f for f in found if "sglang-0.5.15-needs-nixl-1.1" in f["message"] and f["severity"] == "error"]
    _, found = _known(tmp_path, "0.5.15", env={"NIXL_VERSION": "1.2.0"})
    assert not [f for f in found if "needs-nixl" in f["message"]]


def test_known_issue_b200_nixl_0_10_is_a_warning(tmp_path):
    _, found = _known(tmp_path, "0.5.9", env={"NIXL_VERSION": "0.10.0"}, prefill_extra={"kvcheck-gpu": "b200"})
    hits = [f for f in found if "nixl-0.10.0-b200-cross-numa" in f["message"]]
    assert hits and hits[0]["severity"] == "warning" and "vllm-project/vllm/issues/35799" in hits[0]["message"]


# ---------------------------------------------------------------------------------------
# explain by release
# ---------------------------------------------------------------------------------------

NO_SEGMENTS = "ValueError: NIXL KV transfer has no KV memory segments"


def _explain(*args):
    proc = run_cli("explain", *args, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_explain_no_segments_by_release():
    # nixl/conn.py: the guard is in 0.5.15..0.5.23. 0.5.15/0.5.16 have no `if n_src == 0:
    # return` before it, but their NixlKVManager.__init__ refuses a prefill with zero KV
    # regions at start-up (_homogeneous_kv_mem_kind([], "source"); the conformance worker
    # drives 0.5.16 on such pairs), so the segment list is never empty there either.
    info = _explain(NO_SEGMENTS, "--sglang-version", "0.5.8")["hits"][0]["release_info"]
    assert info["exists"] is False and info["ranges"] == [["0.5.15", "0.5.23"]]
    info = _explain(NO_SEGMENTS, "--sglang-version", "0.5.16")["hits"][0]["release_info"]
    assert info["exists"] is True and info["reachable"] is False and "start-up" in info["why"]
    info = _explain(NO_SEGMENTS, "--sglang-version", "0.5.23")["hits"][0]["release_info"]
    assert info["exists"] is True and info["reachable"] is False


def test_explain_follows_the_version_the_log_shows(tmp_path):
    log = tmp_path / "decode.log"
    log.write_text("pulling lmsysorg/sglang:v0.5.8-cu126\n" + NO_SEGMENTS + "\n")
    out = _explain("--log", str(log))
    assert out["release"] == "0.5.8" and out["release_source"] == "the version the log shows"
    assert out["hits"][0]["release_info"]["exists"] is False


def test_known_issue_hetero_tp_mha_before_0_5_11(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "tp-size": 2})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {**DECODE, "tp-size": 1})
    found = []
    for version in ("0.5.10", "0.5.11"):
        proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--sglang-version", version)
        found.append([f for f in json.loads(proc.stdout)["findings"] if "hetero-tp-mha-before-0.5.11" in f["message"]])
    assert found[0] and found[0][0]["severity"] == "warning" and "sgl-project/sglang/pull/22145" in found[0][0]["message"]
    assert not found[1]
