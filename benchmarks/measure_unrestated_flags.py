"""Which flag values SGLang 0.5.23 refuses at start-up where kvcheck's restated steps predict a
start: the table ``kvcheck/sglang/startup/unrestated.py`` (``UNRESTATED_REFUSING_VALUES``) is
made from this script's output.

Every ``store_true`` flag and every choice of a ``choices`` flag of the installed SGLang's own
parser is given, one at a time, to a plain PD server (``--disaggregation-mode prefill|decode``,
the transfer backend named, TP 8 for DeepSeek models) and run through the release's own
start-up (``tests/startup_corpus.runtime_outcome``: ``prepare_server_args`` ->
``resolve_once()`` -> ``check_server_args()`` on an H100) and through
``kvcheck.sglang.startup.first_outcome``. Printed: ``FALSEPASS`` (the runtime refuses, kvcheck
predicts a start: a value for the table), ``FALSEFAIL`` (kvcheck refuses, the runtime starts),
``TEXTDIFF`` (both refuse, other texts). A ``Stop`` (unchecked) is never printed.

Run by hand (about a minute per model, backend and two roles on 2 busy cores)::

    PYTHONPATH=$PWD:$PWD/tests:$PWD/tests/stubs .venv/bin/python benchmarks/measure_unrestated_flags.py \
        llama-3.1-8b nixl
    ... deepseek-v3 nixl
    ... llama-3.1-8b mooncake
    ... llama-3.1-8b nixl --numeric   # also every int/float flag at the probe values

The table was made from these three runs (before ``unrestated_flag`` existed); after it, the
three print nothing but ``done``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import startup_corpus as C  # tests/
from helpers import model_dir  # tests/

from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.gpu import resolve_gpu
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang.startup import Refusal, first_outcome
from kvcheck.sides import Side


def variants(parser: argparse.ArgumentParser) -> list[dict]:
    out: list[dict] = []
    for act in parser._actions:
        if not act.option_strings or act.dest in ("help", "config", "model_path"):
            continue
        if isinstance(act, argparse._StoreTrueAction):
            out.append({act.dest: True})
        elif act.choices and act.nargs in (None, "?"):
            out += [{act.dest: c} for c in act.choices if c != act.default]
        elif "--numeric" in sys.argv and act.type in (int, float) and act.nargs is None:
            from kvcheck.sglang.startup.unrestated import FLOAT_PROBES, INT_PROBES

            out += [{act.dest: act.type(v)} for v in (INT_PROBES if act.type is int else FLOAT_PROBES)]
    return out


def main() -> None:
    from sglang.srt.server_args import ServerArgs as RuntimeArgs

    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser()
    RuntimeArgs.add_cli_args(parser)
    model = sys.argv[1] if len(sys.argv) > 1 else "llama-3.1-8b"
    backend = sys.argv[2] if len(sys.argv) > 2 else "nixl"
    tmp = Path(tempfile.mkdtemp())
    d = tmp / model
    d.mkdir()
    shutil.copy(model_dir(model) / "config.json", d / "config.json")
    mc = parse_model_config(json.loads((d / "config.json").read_text()), str(d / "config.json"))
    todo = variants(parser)
    for role in ("prefill", "decode"):
        for v in todo:
            flags = {"disaggregation_mode": role, "disaggregation_transfer_backend": backend,
                     "tp_size": 8 if "deepseek" in model else 1, **v}
            try:
                rt = C.runtime_outcome(d, flags, (9, 0))
            except BaseException:  # the parser exits on a value it refuses: not a start-up
                continue
            try:
                side = Side(role=role, args=ServerArgs(model_path=str(d), **flags), raw_args=dict(flags), model=mc,
                            origin="measure", gpu="h100")
            except ValueError:  # kvcheck's typed args refuse it (a page size of 0): exit 2, not a pass
                continue
            kv = first_outcome(side, resolve_gpu("h100"))
            if rt is not None and kv is None:
                print("FALSEPASS", role, v, rt[:3], flush=True)
            elif rt is None and isinstance(kv, Refusal):
                print("FALSEFAIL", role, v, kv.message[:100], flush=True)
            elif rt is not None and isinstance(kv, Refusal) and kv.message != rt[1]:
                print("TEXTDIFF", role, v, rt[1][:100], "|", kv.message[:100], flush=True)
    shutil.rmtree(tmp)
    print("done", len(todo))


if __name__ == "__main__":
    main()
