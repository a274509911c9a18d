"""The SGLang router's own messages: what a router line kvcheck knows means.

The router (sgl-router, later sgl-model-gateway, now ``smg``) is a Rust process; its lines
are placed as its own by ``kvcheck.explain.lines`` (its tracing format and targets) and are
never read with SGLang's or another project's message formats. ``router.yaml`` restates a
few of its PD-relevant messages (worker selection, PD dispatch, health checks, circuit
breaker) from its source at lightseekorg/smg 73da68ca (each row cites the file and
function of its ``error!``/``warn!``/``info!`` macro); ``router_message_finding`` reads a
router line's message WHOLE against them.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

import yaml

from kvcheck.explain.lines import ROUTER_JSON, ROUTER_PREFIX
from kvcheck.explain.rulebase import GenericFinding

# a Rust format field: ``{}``, ``{e}``, ``{:?}``, ``{err:?}``
_RUST_FIELD = re.compile(r"\{[\w]*(?::[^}]*)?\}")
_FILL = re.compile(r"\{(\d+)\}")


def _pattern(fmt: str) -> re.Pattern[str]:
    """The regex of a Rust format string: its literal text, each field a group (the last
    one taking the rest of the line)."""
    parts = _RUST_FIELD.split(fmt)
    rx = ""
    for i, lit in enumerate(parts):
        rx += re.escape(lit)
        if i < len(parts) - 1:
            rx += "(.+)" if i == len(parts) - 2 and not parts[-1] else "(.+?)"
    return re.compile(rx)


@functools.lru_cache(maxsize=1)
def router_messages() -> list[tuple[re.Pattern[str], dict[int, re.Pattern[str]], dict[str, Any]]]:
    """``router.yaml``'s messages: (the message's regex, each ``when`` field's pattern, the row)."""
    text = resources.files("kvcheck.explain").joinpath("router.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    out = []
    for row in data["messages"]:
        when = {int(k): re.compile(v) for k, v in (row.get("when") or {}).items()}
        out.append((_pattern(row["format"]), when, row))
    return out


def router_message(line: str) -> str:
    """A router line's message: the line without its tracing prefix (time, level, target,
    source file and line), or a JSON line's ``message`` field, stripped."""
    if ROUTER_JSON.match(line):
        try:
            msg = json.loads(line).get("message")
        except (ValueError, AttributeError):  # a JSON line cut in a paste: its text as it is
            msg = None
        return msg.strip() if isinstance(msg, str) else line.strip()
    m = ROUTER_PREFIX.match(line)
    return (line[m.end() :] if m else line).strip()


def router_message_finding(lineno: int, line: str) -> GenericFinding | None:
    """The finding of a router line whose message is one ``router.yaml`` states (matched
    whole, each ``when`` field matching), or None."""
    msg = router_message(line)
    for rx, when, row in router_messages():
        m = rx.fullmatch(msg)
        if m is None:
            continue
        args = [g.strip() for g in m.groups()]
        if any(i >= len(args) or p.search(args[i]) is None for i, p in when.items()):
            continue

        def fill(t: str, args: list[str] = args) -> str:
            return _FILL.sub(lambda f: args[int(f.group(1))] if int(f.group(1)) < len(args) else "", t)

        return GenericFinding(
            id=row["id"],
            title=fill(row["title"]),
            engine="sglang-router",
            line=lineno,
            component=row["component"],
            text=line.strip()[:300],
            role=row.get("role", "cause"),
            cause=fill(row["cause"]) + f" The SGLang router logs it in {row['where']} (smg source, commit 73da68ca).",
            checks=[fill(c) for c in row.get("checks") or []],
            fix=fill(row["fix"]),
        )
    return None
