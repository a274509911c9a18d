"""Jupyter notebooks (``.ipynb``): the launch lines of their cells, at their own lines.

Vendor recipes ship as notebooks (AMD's "PD disaggregation with SGLang" on ROCm/gpuaidev):
the SGLang launch lines sit in Markdown cells as fenced ``bash`` blocks, or in code cells
as ``%%bash`` cells / ``!`` shell escapes. ``as_markdown`` turns the notebook into Markdown
with the same number of lines as the file, each source line at the file line the
notebook's JSON holds it on (nbformat writes one source string per line), every other
line blank; code cells that run shell become fenced blocks. The docs-block reader
(``kvcheck.sources.deployments.scripts``) then reads it, and findings name file lines.
A notebook whose sources are not one string per line (a single-string ``source``) is read
by its cells in order, with lines counted from the cell's ``source`` key.
"""

from __future__ import annotations

import json
import re

_SOURCE = re.compile(r'^\s*"source": \[\s*$')
_TYPE = re.compile(r'^\s*"cell_type": "(\w+)"')


def is_notebook(name: str, text: str) -> bool:
    return name.endswith(".ipynb") and text.lstrip().startswith("{") and '"cells"' in text[:4096]


def as_markdown(text: str) -> str:
    raw = text.splitlines()
    out = [""] * len(raw)
    kind = ""
    i = 0
    while i < len(raw):
        m = _TYPE.match(raw[i])
        if m:
            kind = m.group(1)
        if _SOURCE.match(raw[i]):
            start = i
            lines: list[tuple[int, str]] = []
            i += 1
            while i < len(raw) and raw[i].strip() not in ("]", "],"):
                s = raw[i].strip().rstrip(",")
                try:
                    piece = json.loads(s)
                except ValueError:
                    piece = ""
                lines.append((i, piece.rstrip("\n") if isinstance(piece, str) else ""))
                i += 1
            _place(out, kind, start, i, lines)
        i += 1
    return "\n".join(out) + "\n"


def _place(out: list[str], kind: str, start: int, end: int, lines: list[tuple[int, str]]) -> None:
    if kind == "markdown":
        for n, s in lines:
            out[n] = s
        return
    if kind != "code" or not lines:
        return
    first = lines[0][1].strip()
    if first.startswith(("%%bash", "%%sh", "%%script bash")):
        body = lines[1:]
    elif any(s.lstrip().startswith("!") for _, s in lines):
        body = [(n, s.lstrip()[1:]) for n, s in lines if s.lstrip().startswith("!")]
    else:
        return  # Python: not a shell launch
    out[start] = "```bash"
    for n, s in body:
        out[n] = s
    if end < len(out):
        out[end] = "```"
