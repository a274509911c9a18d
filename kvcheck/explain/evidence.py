"""Fixes consistent with what the log shows, and the lines of the given configs to change.

- ``refused_values``: option values the log shows refused (the values a refusal message
  carries: ``... incompatible with speculative decoding (--speculative-algorithm EAGLE)``
  refuses EAGLE, and the EAGLE family it resolves from: NEXTN).
- ``consistent_fix``: a fix text without the alternatives that propose a refused value
  (fix texts list alternatives as "X, or Y" / "X; Y"); what was dropped is said.
- ``flag_lines``: where a flag is set in a config file the user gave (``--prefill``,
  ``--decode``, ``-f``): ``(path, line number, line)``, for "change line N of FILE".
"""

from __future__ import annotations

import re
from pathlib import Path

# message templates whose field values are refused values
_REFUSAL = re.compile(r"incompatible|not supported|NOT support|only supports|unsupported|refuse|requires", re.I)
_FAMILIES = {
    "EAGLE": {"EAGLE", "NEXTN"},  # NEXTN resolves to EAGLE
    "NEXTN": {"EAGLE", "NEXTN"},
    "EAGLE3": {"EAGLE3"},
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")


def refused_values(findings, catalog) -> set[str]:
    """Upper-cased values the log shows refused (from refusal messages' fields and the
    signatures' ``refused`` lists)."""
    out: set[str] = set()
    for f in findings:
        if f.kind == "catalog":
            e = catalog.get(f.id)
            if not _REFUSAL.search(e.template):
                continue
            for _name, val in (f.values or {}).items():
                v = val.strip().strip("'\"").upper()
                if v and re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", v):
                    out |= _FAMILIES.get(v, {v})
    return out


def consistent_fix(fix: str, refused: set[str]) -> tuple[str, list[str]]:
    """``fix`` without the alternatives that propose a refused value; (text, dropped)."""
    if not refused:
        return fix, []
    alts = re.split(r"(?:;\s+|,?\s+or\s+)", fix)
    keep, dropped = [], []
    for a in alts:
        words = {w.upper() for w in re.findall(r"[A-Za-z][A-Za-z0-9_]+", a)}
        if words & refused:
            dropped.append(a.strip(" ."))
        else:
            keep.append(a.strip(" ."))
    if not dropped:
        return fix, []
    if not keep:
        return "", dropped
    text = "; or ".join(keep)
    return text[0].upper() + text[1:] + ".", dropped


def flags_in(text: str) -> list[str]:
    """The command-line flags a fix or finding names, in order, once each."""
    seen: list[str] = []
    for f in _FLAG.findall(text or ""):
        if f not in seen:
            seen.append(f)
    return seen


def flag_lines(path: str | Path, flags: list[str], limit: int = 5) -> list[tuple[str, int, str]]:
    """Where ``flags`` (``--page-size``; YAML keys ``page-size:``/``page_size:`` too) are
    set in the text file ``path``: (path, line number, the line). A file kvcheck cannot
    read gives nothing (the preflight reports unreadable inputs itself)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return []
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        for flag in flags:
            key = flag[2:]
            m = re.search(
                rf"(?<![\w-]){re.escape(flag)}(?![\w-])|"
                rf"^\s*-?\s*[\"']?(?:{re.escape(key)}|{re.escape(key.replace('-', '_'))})[\"']?\s*:",
                line,
            )
            if m:
                a = m.start()
                snippet = line[a : m.end() + 30].strip()
                out.append((str(path), n, ("…" if a else "") + snippet + ("…" if m.end() + 30 < len(line) else "")))
                break
        if len(out) >= limit:
            break
    return out
