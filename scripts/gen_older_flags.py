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
(``ServerArgs.add_cli_args``). ``--verify X PATH`` checks the reading itself on a
release whose own parser kvcheck's flag store was generated from (``scripts/gen_flags.py``
drives ``ServerArgs.add_cli_args``): the literals of its ``server_args.py`` must equal its
table's option strings (0.5.0rc2 .. 0.5.12 keep every ``add_argument`` in that one file;
the 0.4.x parsers do not import here, they need an older triton).

Usage::

    python scripts/gen_older_flags.py WHEEL_DIR            # write the JSON from the wheels there
    python scripts/gen_older_flags.py WHEEL_DIR --verify 0.5.0rc2 /work/sglang-src/0.5.0rc2/sglang/srt/server_args.py

Never imported by kvcheck.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
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
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
            out.update(names)
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            if getattr(action, "attr", None) == "BooleanOptionalAction":  # argparse adds --no-X
                out.update("--no-" + n[2:] for n in names if n.startswith("--"))
    return out


def read_wheel(path: Path) -> tuple[str, set[str]]:
    version = path.name.split("-")[1]
    with zipfile.ZipFile(path) as z:
        src = z.read("sglang/srt/server_args.py").decode("utf-8")
    return version, literals(src)


def check_method(release: str, server_args: Path) -> str | None:
    """The literal reading checked against a release whose own parser kvcheck's flag store
    was generated from (``scripts/gen_flags.py`` drives ``ServerArgs.add_cli_args``): the
    option strings read from that release's ``server_args.py`` must equal its table's.
    (The 0.4.x parsers themselves do not import here: they need an older triton.)
    Returns None when equal, else what differs."""
    sys.path.insert(0, str(REPO))
    from kvcheck.sglang.flags import FlagTable

    table = {o for f in FlagTable.load(release) for o in f.option_strings} - {"-h", "--help"}
    read = literals(server_args.read_text("utf-8")) - {"-h", "--help"}
    if table == read:
        return None
    return f"table only {sorted(table - read)}, literals only {sorted(read - table)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", type=Path)
    ap.add_argument("--verify", nargs=2, action="append", default=[], metavar=("RELEASE", "SERVER_ARGS_PY"),
                    help="check the literal reading on a release kvcheck has a table for (its server_args.py)")
    args = ap.parse_args(argv)
    wheels = sorted(args.wheels.glob("sglang-*.whl"), key=lambda p: _key(p.name.split("-")[1]))
    per: dict[str, set[str]] = dict(read_wheel(w) for w in wheels)
    for release, path in args.verify:
        diff = check_method(release, Path(path))
        if diff:
            print(f"{release}: literals and flag table differ: {diff}")
            return 1
        print(f"{release}: literals of {path} equal its flag table's option strings")
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
