"""Test helpers: write a pair of SGLang --config YAML files around a bundled model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "configs" / "models"


def model_dir(name: str) -> Path:
    """The bundled directory holding ``name``'s config.json (usable as model-path)."""
    path = MODELS / name
    assert (path / "config.json").exists(), path
    return path


def write_config(tmp: Path, name: str, model: str, args: dict) -> Path:
    """Write ``args`` (dash keys) as a SGLang --config YAML with model-path filled in."""
    data = {"model-path": str(model_dir(model))}
    data.update(args)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# The release a pair test runs on when it names none. Before the release window (issue 14)
# the pair path took the SGLang installed in the test venv (0.5.23) for a side whose input
# named no release; tests that rested on that assumption now say it: ``run_cli`` adds
# ``--sglang-version PAIR_TEST_RELEASE`` to a ``preflight``/``explain --prefill/--decode`` that names no
# release itself (``pin=False`` keeps the window: tests of the release stage).
PAIR_TEST_RELEASE = "0.5.23"
_RELEASE_OPTIONS = ("--sglang-version", "--prefill-sglang-version", "--decode-sglang-version")


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 60, pin: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m kvcheck ARGS`` in a fresh process, as a user would."""
    args = tuple(args)
    if pin and args[:1] in (("preflight",), ("explain",)) and ("--prefill" in args or "-p" in args) and not any(a.split("=")[0] in _RELEASE_OPTIONS for a in args):
        if not any(_names_release(a) for a in args):
            args = args + ("--sglang-version", PAIR_TEST_RELEASE)
    return subprocess.run([sys.executable, "-m", "kvcheck", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _names_release(arg: str) -> bool:
    """A pair input that names its own release (a ``kvcheck-sglang-version`` key, a
    snapshot's ``/server_info`` version) or is a live server."""
    if arg.startswith(("http://", "https://")):
        return True
    p = Path(arg)
    try:
        if p.is_file() and p.stat().st_size < 1 << 20:
            text = p.read_text(errors="replace")
            return "kvcheck-sglang-version" in text or '"server_info"' in text
    except OSError:
        return False
    return False


def preflight_json(tmp: Path, model: str, prefill: dict, decode: dict, *extra: str, decode_model: str | None = None) -> tuple[int, dict]:
    """Run ``kvcheck preflight --format json`` on a generated pair; (exit status, report)."""
    p = write_config(tmp, "prefill", model, prefill)
    d = write_config(tmp, "decode", decode_model or model, decode)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--kernel", "builtin", *extra)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def report_findings(report) -> list[dict]:
    """Every finding of a ``-o json`` report (pair or ``-f``: top level, per pair, per class,
    per deployment), wherever it is attached: each dict holding ``id``, ``severity`` and
    ``message``, in document order."""
    out: list[dict] = []

    def walk(o) -> None:
        if isinstance(o, dict):
            if {"id", "severity", "message"} <= o.keys():
                out.append(o)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(report)
    return out


def runtime_messages(report: dict) -> list[str]:
    return [(f.get("runtime_error") or {}).get("message") for f in report["findings"] if f.get("runtime_error")]


def flags_argv(flags: dict) -> list[str]:
    """SGLang command-line options for ``{dest: value}``: ``True`` -> the bare flag,
    ``False``/``None`` -> left out, else ``--dest-name value``."""
    out: list[str] = []
    for dest, value in flags.items():
        opt = "--" + dest.replace("_", "-")
        if value is True:
            out.append(opt)
        elif value is not None and value is not False:
            out += [opt, str(value)]
    return out


# The platform facts SGLang's ``override_platform`` takes for a Hopper (sm90) and a
# Blackwell (sm100) GPU, for tests that run the runtime's resolution on CPU.
HOPPER = dict(capability=(9, 0), facts=dict(is_cuda=True, is_hip=False, is_sm90=True, is_hopper_with_cuda_12_3=True, is_sm100=False,
                                             is_sm100_or_sm110=False, is_sm110=False, is_sm120=False, is_blackwell=False, has_flashinfer=True,
                                             device_capability=(9, 0), device_sm=90))
BLACKWELL = dict(capability=(10, 0), facts=dict(is_cuda=True, is_hip=False, is_sm90=False, is_hopper_with_cuda_12_3=False, is_sm100=True,
                                                is_sm100_or_sm110=True, is_sm110=False, is_sm120=False, is_blackwell=True, has_flashinfer=True,
                                                device_capability=(10, 0), device_sm=100))
