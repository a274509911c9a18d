#!/usr/bin/env python3
"""Which SGLang releases contain each ``kvcheck explain`` catalog message.

For every entry of ``kvcheck/explain/catalog.yaml`` and every release unpacked under
``--tree`` (``<tree>/<version>/sglang``, as ``scripts/gen_flags.py --tree`` uses), scan
that release's Python source for the message's literal text: each literal stretch of the
template (the text between ``{field}`` placeholders) of 6 or more characters must occur
in one source file, after joining implicitly concatenated string literals (``"abc "\\n
"def"`` -> ``"abc def"``). Entries formatted outside SGLang (``project:`` sources, e.g.
NIXL's own text) are not scanned. The result is written, as release ranges over the
modeled releases, to ``kvcheck/explain/releases.json``::

    {"releases": [...every scanned release, oldest first...],
     "messages": {"<entry id>": [["0.5.13", "0.5.23"], ...] or "not-sglang"},
     "reachable": {"<entry id>": {"<release>": false, ...}}   # carried over, hand-verified}

``reachable`` holds per-release reachability verified by reading that release's code
(the catalog's own ``reachable`` is 0.5.23's); the script keeps what is there.

Usage: python scripts/gen_message_releases.py --tree /tmp/sgl [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from kvcheck.release.version import unpacked_releases  # noqa: E402
OUT = REPO / "kvcheck" / "explain" / "releases.json"
CATALOG = REPO / "kvcheck" / "explain" / "catalog.yaml"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
# the end of one string literal and the start of the next, implicitly concatenated
_JOIN = re.compile(r"""(["'])\s*(?:#[^\n]*)?\n\s*[rRbBfFuU]{0,2}(["'])""")
_FSTRING_EXPR = re.compile(r"\{[^{}]*\}")



def _source_text(release_dir: Path) -> list[str]:
    """Every .py file of a release, with adjacent string literals joined."""
    out = []
    for p in sorted((release_dir / "sglang").rglob("*.py")):
        try:
            text = p.read_text("utf-8", errors="replace")
        except OSError:
            continue
        prev = None
        while prev != text:
            prev = text
            text = _JOIN.sub(lambda m: "" if m.group(1) == m.group(2) else m.group(0), text)
        out.append(text)
    return out


def _fragments(template: str) -> list[str]:
    parts = [p for i, p in enumerate(_PLACEHOLDER.split(template)) if i % 2 == 0]
    return [p for p in parts if len(p.strip()) >= 6]


WINDOW = 30
BLOCK = WINDOW // 2


def present(entry: dict, files: list[str], loose: bool = False) -> bool:
    """All literal stretches of the entry's template occur in one file. ``loose``: a
    stretch counts when any 30-character window of it occurs (for messages the runtime
    composes from parts, e.g. ``f"NIXL {context} mixed ..."``)."""
    frags = _fragments(entry["template"])
    if not frags:
        return False

    def found(f: str, text: str) -> bool:
        if f in text:
            return True
        if not loose or len(f) <= WINDOW:
            return False
        # Every WINDOW-long stretch of f holds one of its aligned BLOCK-long pieces whole
        # (BLOCK <= (WINDOW + 1) // 2): a text with none of them has none of the windows
        # (the same answer as the window scan alone, which is 10-20 times slower).
        if not any(f[k:k + BLOCK] in text for k in range(0, len(f) - BLOCK + 1, BLOCK)):
            return False
        return any(f[i:i + WINDOW] in text for i in range(0, len(f) - WINDOW + 1))

    for text in files:
        if all(found(f, text) for f in frags):
            return True
    return False


def ranges(flags: list[bool], releases: list[str]) -> list[list[str]]:
    """[[first, last], ...] of consecutive releases where ``flags`` is true."""
    out: list[list[str]] = []
    run_start = None
    for i, (ok, v) in enumerate(zip(flags, releases)):
        if ok and run_start is None:
            run_start = v
        if not ok and run_start is not None:
            out.append([run_start, releases[i - 1]])
            run_start = None
    if run_start is not None:
        out.append([run_start, releases[-1]])
    return out


def generate(tree: Path, previous: dict | None = None) -> dict:
    entries = yaml.safe_load(CATALOG.read_text("utf-8"))["entries"]
    releases = unpacked_releases(tree)
    found: dict[str, list[bool]] = {e["id"]: [] for e in entries}
    newest = _source_text(tree / releases[-1])
    # a message not found literally in the newest release (whose text the catalog tests
    # verify) is composed from parts: match it loosely everywhere
    # (an entry whose source is an older SGLang release, ``project: sglang X .. Y``, is
    # scanned literally: it is absent from the newest release by design)
    loose = {e["id"] for e in entries if not present(e, newest) and not any(str(s.get("project", "")).startswith("sglang") for s in e["sources"])}
    for v in releases:
        files = newest if v == releases[-1] else _source_text(tree / v)
        for e in entries:
            found[e["id"]].append(present(e, files, e["id"] in loose))
        print(f"scanned {v}", file=sys.stderr)
    messages: dict[str, object] = {}
    for e in entries:
        old_sglang = any(str(s.get("project", "")).startswith("sglang") for s in e["sources"])
        if all(s.get("project") for s in e["sources"]) and not old_sglang:
            messages[e["id"]] = "not-sglang"
        elif not found[e["id"]][-1] and not old_sglang:
            messages[e["id"]] = "not-scanned"  # composed at run time: no literal to find
        else:
            messages[e["id"]] = ranges(found[e["id"]], releases)
    return {
        "generated_by": "scripts/gen_message_releases.py",
        "releases": releases,
        "messages": messages,
        "reachable": (previous or {}).get("reachable", {}),
    }


def render(data: dict) -> str:
    lines = ["{"]
    lines.append(f'  "generated_by": {json.dumps(data["generated_by"])},')
    lines.append(f'  "releases": {json.dumps(data["releases"])},')
    lines.append('  "messages": {')
    lines.append(",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in data["messages"].items()))
    lines.append("  },")
    lines.append(f'  "reachable": {json.dumps(data["reachable"], indent=2, sort_keys=True)}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=Path("/tmp/sgl"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    previous = json.loads(OUT.read_text("utf-8")) if OUT.exists() else None
    text = render(generate(args.tree, previous))
    if args.check:
        same = OUT.exists() and OUT.read_text("utf-8") == text
        print("up to date" if same else f"{OUT} differs: run scripts/gen_message_releases.py")
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
