#!/usr/bin/env python3
"""Generate ``kvcheck/release/older_flags.json``: the option strings of every SGLang
release before the ones kvcheck has argparse tables for (0.4.0 .. 0.4.10.post2).

kvcheck decides nothing on those releases (no flag table, no PD model). It needs only to
know that a flag the modeled releases refuse was a flag of an older release: a launch
line written for SGLang 0.4.x (``--enable-deepep-moe``, ``--enable-ep-moe``) is then a
side on a release kvcheck does not model (``unknown-release``, unchecked), not a typo
the server refuses (``kvcheck.release.older``).

Read from each release's own wheel on PyPI (``pip download --no-deps sglang==X``): every
string literal option passed to ``add_argument`` in ``sglang/srt/server_args.py``
(``ServerArgs.add_cli_args``). ``--verify X`` also drives release X's own parser (its
``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser``, in a subprocess with
``PYTHONPATH=<unpacked wheel>:tests/stubs``, as ``scripts/gen_flags.py`` does) and
compares its option strings with the literals read: the two must be equal.

Usage::

    python scripts/gen_older_flags.py WHEEL_DIR            # write the JSON from the wheels there
    python scripts/gen_older_flags.py WHEEL_DIR --verify 0.4.8.post1

Never imported by kvcheck.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "kvcheck" / "release" / "older_flags.json"


def _key(v: str) -> tuple:
    parts = re.findall(r"\d+|post|rc", v)
    return tuple(int(p) if p.isdigit() else {"rc": -1, "post": 1}[p] for p in parts)


def literals(source: str) -> set[str]:
    """The option strings ``add_argument("--x", "--y", ...)`` calls name as literals."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    out.add(a.value)
    return out


def read_wheel(path: Path) -> tuple[str, set[str]]:
    version = path.name.split("-")[1]
    with zipfile.ZipFile(path) as z:
        src = z.read("sglang/srt/server_args.py").decode("utf-8")
    return version, literals(src)


_PROBE = """
import argparse, json, sys
sys.path.insert(0, {stubs!r})
sys.argv = ["x"]
import logging; logging.disable(logging.CRITICAL)
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
print(json.dumps(sorted(o for a in p._actions for o in a.option_strings)))
"""


def parser_options(wheel: Path) -> set[str]:
    """Release ``wheel``'s option strings from its own parser (subprocess)."""
    sys.path.insert(0, str(REPO / "scripts"))
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith("sglang/")])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, str(REPO / "tests" / "stubs")]))
        runner = ("import runpy, sys; sys.path.insert(0, %r); import gen_flags; "
                  "f = gen_flags._StubFinder(); sys.meta_path.append(f); exec(%r)") % (
            str(REPO / "scripts"), _PROBE.format(stubs=str(REPO / "tests" / "stubs")))
        proc = subprocess.run([sys.executable, "-c", runner], env=env, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise SystemExit(f"{wheel.name}: parser failed:\n{proc.stderr[-2000:]}")
        return set(json.loads(proc.stdout.strip().splitlines()[-1])) - {"-h", "--help"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", type=Path)
    ap.add_argument("--verify", action="append", default=[], help="drive this release's own parser and compare")
    args = ap.parse_args(argv)
    wheels = sorted(args.wheels.glob("sglang-*.whl"), key=lambda p: _key(p.name.split("-")[1]))
    per: dict[str, set[str]] = dict(read_wheel(w) for w in wheels)
    for v in args.verify:
        w = next(x for x in wheels if x.name.split("-")[1] == v)
        got = parser_options(w)
        if got != per[v]:
            print(f"{v}: parser {len(got)} options, literals {len(per[v])}; parser only {sorted(got - per[v])}, literals only {sorted(per[v] - got)}")
            return 1
        print(f"{v}: parser and literals agree ({len(got)} option strings)")
    releases = list(per)
    options: dict[str, list[list[str]]] = {}
    for opt in sorted(set().union(*per.values())):
        runs: list[list[str]] = []
        prev = False
        for v in releases:
            has = opt in per[v]
            if has and not prev:
                runs.append([v, v])
            elif has:
                runs[-1][1] = v
            prev = has
        options[opt] = runs
    data = {
        "about": "Option strings of SGLang releases before kvcheck's flag tables, per option the runs of releases that "
                 "register it (add_argument literals of sglang/srt/server_args.py in each release's PyPI wheel; "
                 "scripts/gen_older_flags.py).",
        "releases": releases,
        "options": options,
    }
    OUT.write_text(json.dumps(data, indent=0, sort_keys=False) + "\n", "utf-8")
    print(f"{OUT}: {len(releases)} releases, {len(options)} option strings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
