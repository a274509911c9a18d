"""Bad input gets one clear line naming the file and the field, exit status 2, no
traceback; the inputs are never written to. Each test runs the real CLI process."""

from __future__ import annotations

import json

import pytest

from helpers import REPO, model_dir, run_cli, write_config

PREFILL = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16}
DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


def _assert_input_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_missing_file(tmp_path):
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(tmp_path / "nope.yaml"), "--decode", str(d))
    _assert_input_error(proc, "nope.yaml", "not found")


def test_yaml_syntax_error_names_line(tmp_path):
    bad = tmp_path / "prefill.yaml"
    bad.write_text("model-path: [unclosed\npage-size: 16\n")
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(bad), "--decode", str(d))
    _assert_input_error(proc, "prefill.yaml", "YAML syntax error at line")


def _assert_refused(proc, *needles):
    """A server flag the runtime's parser refuses: that server's start-up refusal (exit 1,
    ``startup-argparse`` with argparse's text), the same on the pair and the -f path
    (issue 14: exit 2 is for kvcheck's own input only)."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    f = next(f for f in report["findings"] if f["id"] == "startup-argparse")
    text = f["message"] + " " + f["fix"]
    for n in needles:
        assert n in text, text
    return f


def test_misspelled_flag_is_refused_like_sglang_with_the_nearest_name(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "page-sise": 16})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json")
    # SGLang's argparse: "unrecognized arguments: --page-sise 16".
    f = _assert_refused(proc, "prefill.yaml", "unrecognized arguments: --page-sise 16", "--page-size")
    assert f["runtime_error"]["message"] == "unrecognized arguments: --page-sise 16"


def test_valid_but_unmodelled_flag_is_accepted(tmp_path):
    # --log-level is a real SGLang flag that does not shape KV: never rejected.
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "log-level": "debug", "tp": 1})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] in ("pass", "warn")


def test_wrong_type_names_the_flag(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "tp-size": "two"})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json")
    _assert_refused(proc, "prefill.yaml", "--tp-size", "two")


def test_model_dir_without_config_json(tmp_path):
    empty = tmp_path / "model"
    empty.mkdir()
    p = tmp_path / "prefill.yaml"
    p.write_text(f"model-path: {empty}\ndisaggregation-mode: prefill\ndisaggregation-transfer-backend: nixl\n")
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    # As with -f: a model kvcheck cannot read is unknown-model (unchecked), naming the path.
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json")
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    f = next(f for f in json.loads(proc.stdout)["findings"] if f["id"] == "unknown-model")
    assert str(empty) in f["message"] and "--model-config" in f["fix"]


def test_hub_id_needs_model_config_and_then_works(tmp_path):
    p = tmp_path / "prefill.yaml"
    p.write_text("model-path: meta-llama/Llama-3.1-8B-Instruct\ndisaggregation-mode: prefill\ndisaggregation-transfer-backend: nixl\npage-size: 16\n")
    d = tmp_path / "decode.yaml"
    d.write_text("model-path: meta-llama/Llama-3.1-8B-Instruct\ndisaggregation-mode: decode\ndisaggregation-transfer-backend: nixl\npage-size: 16\n")
    # As with -f: a hub id is found in kvcheck's catalog (its config.json read from the
    # public repository), and the source is said.
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--model-config", str(model_dir("llama-3.1-8b") / "config.json"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]


def test_config_json_missing_a_geometry_field(tmp_path):
    mdir = tmp_path / "model"
    mdir.mkdir()
    cfg = json.loads((model_dir("llama-3.1-8b") / "config.json").read_text())
    del cfg["num_hidden_layers"]
    (mdir / "config.json").write_text(json.dumps(cfg))
    p = tmp_path / "prefill.yaml"
    p.write_text(f"model-path: {mdir}\ndisaggregation-mode: prefill\n")
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d))
    _assert_input_error(proc, "config.json", "num_hidden_layers")


def test_bad_pp_partition_uses_the_runtime_wording(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "pp-size": 2})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    env = tmp_path / "prefill.env"
    env.write_text("SGLANG_PP_LAYER_PARTITION=10,10\n")
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--prefill-env", str(env))
    # get_pp_indices: ValueError(f"{sum(partitions)=} does not match {num_hidden_layers=}.")
    _assert_input_error(proc, "SGLANG_PP_LAYER_PARTITION", "sum(partitions)=20 does not match num_hidden_layers=32.")


def test_unknown_ignore_id_and_unknown_format(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    _assert_input_error(run_cli("preflight", "-p", str(p), "-d", str(d), "--ignore", "no-such-check"), "--ignore", "no-such-check")
    _assert_input_error(run_cli("preflight", "-p", str(p), "-d", str(d), "--format", "xml"), "--format")


def test_inputs_are_never_written(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "page-size": 32})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    before = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in (p, d)}
    run_cli("preflight", "-p", str(p), "-d", str(d), "--format", "json")
    assert {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in (p, d)} == before


def test_ignored_runtime_error_stays_visible_and_exit_follows_the_rest(tmp_path):
    # auto vs bf16: same bytes, only the bootstrap's string comparison fails.
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {**DECODE, "kv-cache-dtype": "bf16"})
    proc = run_cli("preflight", "-p", str(p), "-d", str(d), "--format", "json", "--ignore", "kv-cache-dtype-mismatch")
    report = json.loads(proc.stdout)
    f = next(f for f in report["findings"] if f["id"] == "kv-cache-dtype-mismatch")
    assert f["ignored"] is True and f["runtime_error"]["type"] == "RuntimeError"
    assert proc.returncode == 0 and report["verdict"] == "pass"
    table = run_cli("preflight", "-p", str(p), "-d", str(d), "--ignore", "kv-cache-dtype-mismatch")
    assert "ignored, but the runtime will still raise it" in " ".join(table.stdout.split())


@pytest.mark.parametrize("pair", ["aligned", "hisparse", "failing"])
def test_readme_examples(pair):
    proc = run_cli("preflight", "--prefill", f"configs/{pair}/prefill.yaml", "--decode", f"configs/{pair}/decode.yaml", cwd=REPO)
    assert proc.returncode == (1 if pair == "failing" else 0), proc.stderr
    assert proc.stdout.splitlines()[0].startswith("FAIL" if pair == "failing" else "PASS")


def test_command_line_file_with_env_prefix(tmp_path):
    cmd = tmp_path / "decode.sh"
    cmd.write_text(
        "SGLANG_DISAGGREGATION_NIXL_BACKEND=UCX \\\n"
        f"python -m sglang.launch_server --model-path {model_dir('llama-3.1-8b')} \\\n"
        "  --disaggregation-mode decode --disaggregation-transfer-backend=nixl --page-size 16\n"
    )
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    proc = run_cli("preflight", "-p", str(p), "-d", str(cmd), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]


def test_usage_errors_exit_2_without_traceback(tmp_path):
    for argv in (["preflight", "-p", "x.yaml", "--foo"], ["preflight", "-p"], ["no-such-command"], ["preflight", "-p", "a", "-d", "b", "--deadline", "nan"]):
        proc = run_cli(*argv)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag,value", [("tp-size", 0), ("tp-size", -4), ("page-size", 0), ("pp-size", -1), ("tp-size", 10**23)])
def test_nonsense_sizes_are_refused(tmp_path, flag, value):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, flag: value})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    _assert_input_error(run_cli("preflight", "-p", str(p), "-d", str(d)), f"--{flag}")


@pytest.mark.parametrize("field,value", [("num_hidden_layers", 0), ("num_hidden_layers", 10**30), ("num_attention_heads", 0)])
def test_nonsense_model_config_values_are_refused(tmp_path, field, value):
    mdir = tmp_path / "model"
    mdir.mkdir()
    cfg = json.loads((model_dir("llama-3.1-8b") / "config.json").read_text())
    cfg[field] = value
    (mdir / "config.json").write_text(json.dumps(cfg))
    p = tmp_path / "prefill.yaml"
    p.write_text(f"model-path: {mdir}\ndisaggregation-mode: prefill\n")
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    _assert_input_error(run_cli("preflight", "-p", str(p), "-d", str(d)), field)


def test_the_same_flag_twice_in_json_args_is_refused(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    d = tmp_path / "decode.json"
    d.write_text(json.dumps({"model-path": str(model_dir("llama-3.1-8b")), "tp_size": 2, "tp-size": 4}))
    _assert_input_error(run_cli("preflight", "-p", str(p), "-d", str(d)), "--tp-size", "twice")


def test_closing_the_pipe_early_keeps_the_verdicts_exit_status():
    import subprocess
    import sys

    cmd = f"{sys.executable} -m kvcheck preflight -p configs/aligned/prefill.yaml -d configs/aligned/decode.yaml --sglang-version 0.5.23 | head -1; echo rc=${{PIPESTATUS[0]}}"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=REPO, timeout=60).stdout
    assert out.startswith("PASS") and out.strip().endswith("rc=0"), out


def test_export_lines_before_the_launch_command(tmp_path):
    cmd = tmp_path / "decode.sh"
    cmd.write_text(
        "export SGLANG_PP_LAYER_PARTITION=16,16\n"
        f"python -m sglang.launch_server --model-path {model_dir('llama-3.1-8b')} --disaggregation-mode decode "
        "--disaggregation-transfer-backend nixl --page-size 16 --pp-size 2\n"
    )
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "pp-size": 2})
    proc = run_cli("preflight", "-p", str(p), "-d", str(cmd), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan"]["n_dst"] == 32  # 16 layers x (K, V) on decode stage 0


def test_unknown_architecture_is_unchecked_never_a_guessed_pass(tmp_path):
    mdir = tmp_path / "model"
    mdir.mkdir()
    cfg = json.loads((model_dir("llama-3.1-8b") / "config.json").read_text())
    cfg["architectures"] = ["FooForCausalLM"]
    (mdir / "config.json").write_text(json.dumps(cfg))
    p = tmp_path / "prefill.yaml"
    p.write_text(f"model-path: {mdir}\ndisaggregation-mode: prefill\ndisaggregation-transfer-backend: nixl\npage-size: 16\n")
    d = tmp_path / "decode.yaml"
    d.write_text(f"model-path: {mdir}\ndisaggregation-mode: decode\ndisaggregation-transfer-backend: nixl\npage-size: 16\n")
    proc = run_cli("preflight", "-p", str(p), "-d", str(d), "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 4, proc.stderr
    # (plus the info line every PD decode logs at start-up: decode-radix-disabled)
    assert report["verdict"] == "unchecked" and [f["id"] for f in report["findings"] if f["severity"] != "info"] == ["architecture-assumed"]


def test_static_pair_imports_only_what_it_uses():
    """The static pair (-o json) imports neither another command's module nor what only a
    table, a live server or explain needs (issue 15: import only what the path uses)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.argv = ['kvcheck', 'preflight', '--prefill', 'configs/aligned/prefill.yaml', '--decode', "
        "'configs/aligned/decode.yaml', '-o', 'json', '--sglang-version', '0.5.23']\n"
        "from kvcheck.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('LOADED ' + ' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('rich', 'httpx', 'torch', 'sglang', 'nixl', 'typer', 'click') or m.startswith(('kvcheck.explain', 'kvcheck.cli.', "
        "'kvcheck.nixl', 'kvcheck.fabric.command', 'kvcheck.mooncake.probe')))) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    loaded = next(ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED")).split()[1:]
    assert '"verdict"' in proc.stdout
    # typer parses the command line (its click); no other command, no rich, httpx, explain, NIXL
    kept = {m for m in loaded if m.split(".")[0] not in ("typer", "click")}
    assert kept <= {
        "kvcheck.cli.output",
        "kvcheck.cli.preflight",
        "kvcheck.cli.preflight_options",
        "kvcheck.cli.options",
        "kvcheck.cli.root",
    }, kept


def test_top_level_help_names_the_backends_and_the_modeled_window():
    """``kvcheck --help`` says what kvcheck decides: NIXL and Mooncake pairs, over the
    releases whose PD path it models (from the release manifest), with no speed claim the
    benchmarks do not support."""
    from kvcheck.release import manifest

    proc = run_cli("--help")
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0
    pd = manifest.pd_releases()
    assert "NIXL" in text and "Mooncake" in text
    assert f"releases {pd[0]} to {pd[-1]}" in text
    assert "milliseconds" not in text

