"""Flags SGLang's own argument parser refuses because of the release: an abbreviation that
matches several flags (``ambiguous option: --page could match --page-size, ...``).

The server exits at start-up (argparse prints ``<prog>: error: <message>`` and raises
``SystemExit(2)`` inside ``prepare_server_args``), so kvcheck reports it as that side's
start-up refusal (``startup-argparse``, an error, exit 1) with argparse's exact text, not as
bad input. The expected texts come from the runtime: SGLang 0.5.23's ``prepare_server_args``
in this process, older releases' parsers in their own process (the test environment installs
them side by side, scripts/setup-test-env.sh). A misspelled flag (``unrecognized arguments``)
stays bad input (exit 2, the README's contract; tests/test_cli_input.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, model_dir, run_cli, write_config
from kvcheck.errors import ArgparseRefusal, InputError
from kvcheck.sglang.flags import FlagTable

PREFILL = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "tp-size": 2}
DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "tp-size": 2}
RELEASES_DIR = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))

# argv tails (after --model-path) argparse refuses or accepts, in the runtime's order: every
# token is classified before any is applied, so an ambiguous one wins over an unknown one.
ARGVS = [
    ["--page", "16"],
    ["--page=16"],
    ["--enable-hi"],
    ["--cuda-graph-max-bs", "256"],
    ["--no-such-flag", "1", "--page", "16"],
    ["--tp", "2"],
    ["--page-size", "16"],
]


def _real_parser_error(argv: list[str]) -> str | None:
    """The text after "error: " that SGLang 0.5.23's ``prepare_server_args`` prints before
    ``SystemExit(2)``, or None when it parses (the ServerArgs it builds is not used)."""
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            prepare_server_args(["--model-path", str(model_dir("llama-3.1-8b"))] + argv)
    except SystemExit as exc:
        assert exc.code == 2
        return err.getvalue().strip().splitlines()[-1].split("error: ", 1)[1]
    except Exception:  # noqa: BLE001  (a refusal after parsing: not argparse's)
        return None
    return None


def _ours(argv: list[str], version: str = "0.5.23") -> str | None:
    try:
        FlagTable.load(version).parse_argv(argv)
    except ArgparseRefusal as exc:
        return exc.argparse_message
    except InputError:
        return "input error"
    return None


@pytest.mark.runtime
@pytest.mark.parametrize("argv", ARGVS, ids=[" ".join(a) for a in ARGVS])
def test_ambiguous_abbreviation_is_the_parsers_own_error(argv):
    pytest.importorskip("sglang")
    real = _real_parser_error(argv)
    ours = _ours(argv)
    if real is not None and real.startswith("ambiguous option"):
        assert ours == real
    else:
        assert ours is None or ours == "input error"  # accepted, or bad input (unknown flag), never an ArgparseRefusal


@pytest.mark.runtime
def test_preflight_reports_it_as_the_sides_startup_refusal(tmp_path):
    """``page: 16`` in the prefill's --config YAML: SGLang's ConfigArgumentMerger turns it into
    ``--page 16`` and argparse refuses it; kvcheck exits 1 with one startup-argparse error on
    the prefill carrying the parser's text, reads the decode, and runs no pair check."""
    pytest.importorskip("sglang")
    real = _real_parser_error(["--page", "16"])
    assert real is not None and real.startswith("ambiguous option: --page could match --page-size")
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "page": 16})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {**DECODE, "page-size": 16})
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--sglang-version", "0.5.23")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "fail"
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [f["id"] for f in errors] == ["startup-argparse"]
    rt = errors[0]["runtime_error"]
    assert (rt["type"], rt["message"], rt["when"], rt["first"]) == ("SystemExit", real, "start-up", True)
    assert rt["raised_by"].startswith("prefill: server start-up")
    assert "pair-not-checked" in [f["id"] for f in report["findings"]]
    assert report["sides"][0]["sglang_version"] == "0.5.23" and report["sides"][1]["model"] == "LlamaForCausalLM"
    # both sides refused: one finding each
    d2 = write_config(tmp_path, "decode2", "llama-3.1-8b", {**DECODE, "page": 16})
    both = run_cli("preflight", "--prefill", str(p), "--decode", str(d2), "--format", "json", "--sglang-version", "0.5.23")
    assert both.returncode == 1
    assert [f["id"] for f in json.loads(both.stdout)["findings"] if f["severity"] == "error"] == ["startup-argparse", "startup-argparse"]


def test_a_misspelled_flag_is_that_servers_start_up_refusal(tmp_path):
    # Issue 14: a server flag the runtime's parser refuses is a failed deployment (exit 1),
    # the same on the pair and the -f path; exit 2 stays for kvcheck's own input.
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, "page-sise": 16})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d))
    assert proc.returncode == 1 and "unrecognized arguments: --page-sise 16" in proc.stdout


def _release_parser_error(release: str, argv: list[str]) -> str | None:
    """What release ``release``'s own ``prepare_server_args`` says about ``argv``, in a
    process whose path holds that release (``.venv/sglang-releases/RELEASE``)."""
    code = (
        "import contextlib, io, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "err = io.StringIO()\n"
        "try:\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        prepare_server_args(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    print('ERR ' + err.getvalue().strip().splitlines()[-1].split('error: ', 1)[1])\n"
        "except Exception as exc:\n"
        "    print('LATER ' + type(exc).__name__)\n"
        "else:\n"
        "    print('OK')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(RELEASES_DIR / release), str(RELEASES_DIR / "_deps"), str(REPO / "tests" / "stubs")]))
    proc = subprocess.run([sys.executable, "-c", code, "--model-path", str(model_dir("llama-3.1-8b"))] + argv,
                          env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout.strip().splitlines()
    assert out, proc.stderr[-2000:]
    return out[-1][4:] if out[-1].startswith("ERR ") else None


@pytest.mark.runtime
@pytest.mark.parametrize("release", ["0.5.8", "0.5.22"])
def test_each_release_refuses_as_its_own_parser_does(release, tmp_path):
    """``--cuda-graph-max-bs 256`` is a flag of 0.5.8 (and an alias up to 0.5.19) but an
    ambiguous abbreviation for 0.5.22 (``--cuda-graph-max-bs-decode``/``-prefill``): kvcheck
    reads the side with its release's table and refuses it exactly when that release's
    parser does, with its text."""
    if not (RELEASES_DIR / release / "sglang" / "__init__.py").exists():
        pytest.skip(f"SGLang {release} is not installed beside this one ({RELEASES_DIR}; scripts/setup-test-env.sh)")
    argv = ["--cuda-graph-max-bs", "256"]
    real = _release_parser_error(release, argv)
    assert _ours(argv, release) == real
    line = tmp_path / "prefill.sh"
    line.write_text(f"python -m sglang.launch_server --model-path {model_dir('llama-3.1-8b')} --disaggregation-mode prefill "
                    "--disaggregation-transfer-backend nixl --cuda-graph-max-bs 256\n")
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl"})
    proc = run_cli("preflight", "--prefill", str(line), "--decode", str(d), "--format", "json", "--sglang-version", release)
    ids = [f["id"] for f in json.loads(proc.stdout)["findings"]]
    assert ("startup-argparse" in ids) == (real is not None), (release, real, ids)
    if real is not None:
        assert proc.returncode == 1


def test_deployment_instance_with_an_ambiguous_flag_fails_its_pairs(tmp_path):
    """-f: a launch script whose prefill line abbreviates --page-size ambiguously: that
    instance gets the startup-argparse error and its pair fails (exit 1); no exit 2."""
    script = tmp_path / "launch.sh"
    m = model_dir("llama-3.1-8b")
    script.write_text(
        f"python -m sglang.launch_server --model-path {m} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page 16 &\n"
        f"python -m sglang.launch_server --model-path {m} --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 &\n"
    )
    proc = run_cli("preflight", "-f", str(script), "--format", "json", "--sglang-version", "0.5.23")
    assert proc.returncode == 1, proc.stderr
    assert "ambiguous option: --page could match --page-size" in proc.stdout
    assert '"startup-argparse"' in proc.stdout
