"""SGLang bugs on the PD / KV-transfer paths that a merged change fixed, recognized by the
exception they raise (``fixed_bugs.yaml``; issue 20: "tracebacks from bugs fixed since, with the
fixing release").

An entry is matched structurally, never by a fragment: the exception type, the whole message
against the entry's regex (its fields as named groups, compared with ``when``), the innermost
SGLang frame's file and function, and optionally a function that must be on the stack. A
traceback that shows SGLang frames matches only an entry naming that innermost frame, or one
whose message alone names the bug (``alone``) when the entry names no frame; an exception line
pasted alone matches only ``alone`` entries.

Each entry's ``fixed_in`` is the first release whose source contains the fix, and the releases it
affects are those whose source has the raising code without the fix
(``fixed_bugs_facts.json``, generated from the release wheels by
``scripts/gen_explain_fixed_bugs.py``; checked by ``tests/test_explain_fixed_bugs.py``).
"""

from __future__ import annotations

import functools
import json
import operator
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

_OPS = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "==": operator.eq}


@dataclass(frozen=True)
class FixedBug:
    """One index entry. ``frame_files``: the files the innermost frame may be in (the module moved
    between releases); ``affected``: the releases whose source has the bug and not the fix."""

    id: str
    title: str
    exceptions: tuple[str, ...]
    message: re.Pattern[str] | None
    when: tuple[tuple[str, str, str], ...]
    frame_files: tuple[str, ...]
    frame_function: str
    stack: tuple[str, ...]
    alone: bool
    phase: str
    cause: str
    fix: str
    url: str
    fixed_in: str
    issue: int | None = None
    prs: tuple[int, ...] = ()
    affected: tuple[str, ...] = field(default_factory=tuple)

    def affected_text(self) -> str:
        """The affected releases as runs of consecutive releases (``0.5.10 .. 0.5.15.post1``)."""
        if not self.affected:
            return "no release (the bug lived only on the main branch between releases)"
        order = facts()["releases"]
        runs: list[list[str]] = []
        for r in self.affected:
            if runs and order.index(r) == order.index(runs[-1][-1]) + 1:
                runs[-1].append(r)
            else:
                runs.append([r])
        return ", ".join(run[0] if len(run) == 1 else f"{run[0]} .. {run[-1]}" for run in runs)

    def refs(self) -> str:
        parts = [f"issue #{self.issue}"] if self.issue else []
        parts += [f"PR #{p}" for p in self.prs]
        return ", ".join(parts) + f" ({self.url})"


@functools.lru_cache(maxsize=1)
def facts() -> dict[str, Any]:
    text = resources.files("kvcheck.explain").joinpath("fixed_bugs_facts.json").read_text(encoding="utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def index() -> tuple[FixedBug, ...]:
    raw = yaml.safe_load(resources.files("kvcheck.explain").joinpath("fixed_bugs.yaml").read_text(encoding="utf-8"))
    fx = facts()
    releases = fx["releases"]
    out: list[FixedBug] = []
    for e in raw:
        f = fx["entries"].get(e["id"], {})
        affected = tuple(
            r for r, b, x in zip(releases, f.get("bug", ""), f.get("fix", ""), strict=False) if b == "1" and x == "0"
        )
        exc = e["exception"]
        fr = e.get("frame") or {}
        files = fr.get("file", [])
        prs = e.get("prs") or ([e["pr"]] if e.get("pr") else [])
        out.append(
            FixedBug(
                id=e["id"],
                title=e["title"],
                exceptions=tuple(exc if isinstance(exc, list) else [exc]),
                message=re.compile(e["message"], re.S) if e.get("message") else None,
                when=tuple(tuple(w) for w in e.get("when", [])),
                frame_files=tuple(files if isinstance(files, list) else [files]),
                frame_function=fr.get("function", ""),
                stack=tuple(e.get("stack", [])),
                alone=bool(e.get("alone")),
                phase=e.get("phase", ""),
                cause=" ".join(e["cause"].split()),
                fix=" ".join(e["fix"].split()).replace("{fixed_in}", str(e["fixed_in"])),
                url=e["url"],
                fixed_in=str(e["fixed_in"]),
                issue=e.get("issue"),
                prs=tuple(prs),
                affected=affected,
            )
        )
    return tuple(out)


def _sglang_file(path: str) -> str:
    """``srt/...`` of a frame's path through SGLang's package (``.../sglang/srt/x.py`` or a
    path pasted from ``sglang/srt/x.py``), else ''."""
    p = path.replace("\\", "/")
    m = re.search(r"(?:^|/)sglang/(srt/[\w/]+\.py)$", p)
    return m.group(1) if m else ""


def _when_ok(bug: FixedBug, m: re.Match[str]) -> bool:
    for a, op, b in bug.when:
        try:
            va, vb = int(m.group(a)), int(m.group(b))
        except (IndexError, TypeError, ValueError):
            return False
        if not _OPS[op](va, vb):
            return False
    return True


def match(etype: str, msg: str, frames: list[tuple[str, str, str]]) -> FixedBug | None:
    """The indexed bug this exception is (``etype``: its type, ``msg``: its message, ``frames``:
    (path, line, function), outermost first), or None."""
    own = [(_sglang_file(p), fn) for p, _ln, fn in frames if _sglang_file(p)]
    funcs = {fn for _p, _ln, fn in frames}
    for bug in index():
        if etype not in bug.exceptions and not any(x in msg for x in bug.exceptions if x.startswith("NIXL_ERR")):
            continue
        if bug.message is not None:
            m = bug.message.fullmatch(msg.strip())
            if m is None or not _when_ok(bug, m):
                continue
        if own:
            if bug.frame_function:
                if own[-1][1] != bug.frame_function or own[-1][0] not in bug.frame_files:
                    continue
            elif not bug.alone:
                continue
            if bug.stack and not funcs & set(bug.stack):
                continue
        elif not bug.alone:
            continue
        return bug
    return None


_PREFIX = re.compile(r"^\s*(?:\[[^\]]*\]\s*)+")
_TYPED = re.compile(r"^(?:[\w]+\.)*(?P<type>[A-Za-z]\w*(?:Error|Exception)):\s*(?P<msg>.*)$", re.S)


def match_text(text: str) -> FixedBug | None:
    """The indexed bug a logged line or a message pasted alone names by its whole message (an
    entry with ``alone``): ``text`` with its log prefix (``[date TP0]``) and an optional
    ``Type: `` before the message; a message without a type matches entries of ``logged``."""
    s = _PREFIX.sub("", text.strip())
    m = _TYPED.match(s)
    etype, msg = (m.group("type"), m.group("msg")) if m else ("logged", s)
    for bug in index():
        if not bug.alone or bug.message is None or etype not in bug.exceptions:
            continue
        mm = bug.message.fullmatch(msg.strip())
        if mm is not None and _when_ok(bug, mm):
            return bug
    return None
