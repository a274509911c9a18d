"""Recognize runtime messages in a pasted message or a log, and tie them to a preflight.

``explain_text`` finds every catalog entry whose regex matches somewhere in the text,
line by line, with counts and first/last line numbers. ``attach_preflight`` points each
recognized message to the preflight finding that predicts it (the finding whose
``runtime_error`` text the entry's regex matches, else one with the entry's check id).
"""

from __future__ import annotations

from bisect import bisect_right
from difflib import SequenceMatcher
from typing import Any, Iterable

from pydantic import BaseModel, Field

from kvcheck.explain.catalog import RUNTIME, Catalog, Entry, load_catalog

# explain's exit statuses (documented in `kvcheck explain --help`).
EXIT_RECOGNIZED = 0
EXIT_NOT_RECOGNIZED = 1


class Hit(BaseModel):
    """One catalog entry found in the text: how often, where, and the values it carried
    the first time. ``match`` is ``full`` (the template matched) or ``partial`` (only a
    long literal stretch of it was found: a truncated or reworded message) or ``id`` (the
    entry was named by its catalog id: no count, no line numbers)."""

    entry_id: str
    match: str = "full"
    count: int = 0
    first_line: int = 0
    last_line: int = 0
    text: str = ""
    values: dict[str, str] = Field(default_factory=dict)
    cause: dict[str, Any] | None = None
    # kvcheck.explain.releases.release_info for the explanation's release
    release_info: dict[str, Any] | None = None


class Explanation(BaseModel):
    """The result of ``kvcheck explain``: hits in order of first appearance (specific
    messages before the generic ones that wrap them), and, with configs, the preflight."""

    runtime: str = RUNTIME
    # The SGLang release the explanation follows, and where that came from.
    release: str | None = None
    release_source: str = ""
    source: str = "message"
    lines: int = 0
    hits: list[Hit] = Field(default_factory=list)
    preflight: dict[str, Any] | None = None

    @property
    def recognized(self) -> bool:
        """Whether at least one catalog message was found."""
        return bool(self.hits)

    @property
    def exit_code(self) -> int:
        """0 when something was recognized, 1 when nothing was."""
        return EXIT_RECOGNIZED if self.recognized else EXIT_NOT_RECOGNIZED

    def contract(self, catalog: Catalog | None = None) -> dict[str, Any]:
        """The JSON form: ``recognized``, ``runtime``, ``source``, ``lines``, ``hits``
        (each with its catalog entry), and ``preflight`` when configs were given."""
        catalog = catalog or load_catalog()
        hits = []
        for h in self.hits:
            d = h.model_dump()
            d["entry"] = catalog.get(h.entry_id).summary()
            hits.append(d)
        return {
            "recognized": self.recognized,
            "runtime": self.runtime,
            "release": self.release,
            "release_source": self.release_source,
            "source": self.source,
            "lines": self.lines,
            "hits": hits,
            "preflight": self.preflight,
        }


_MIN_PARTIAL = 24  # characters of literal text needed for a partial recognition
_MAX_PARTIAL_LINES = 50  # partial recognition is for pasted messages, not whole logs


def explain_text(text: str, *, source: str = "message", catalog: Catalog | None = None, by_id: bool | None = None, sglang_version: str | None = None) -> Explanation:
    """``_explain_text`` (below), then, for the release the explanation follows
    (``sglang_version``, else the version the text shows, else the installed SGLang, else
    the newest scanned), whether each recognized message exists and is reachable there
    (``Hit.release_info``, ``kvcheck.explain.releases``)."""
    from kvcheck.explain.releases import choose_explain_release, release_info

    catalog = catalog or load_catalog()
    result = _explain_text(text, source=source, catalog=catalog, by_id=by_id)
    release, where = choose_explain_release(text, sglang_version)
    result.release, result.release_source = release, where
    for hit in result.hits:
        hit.release_info = release_info(hit.entry_id, release, catalog.get(hit.entry_id).reachable)
    return result


def _explain_text(text: str, *, source: str = "message", catalog: Catalog | None = None, by_id: bool | None = None) -> Explanation:
    """Find every catalog message in ``text`` (a message or a whole log).

    With ``by_id`` (default: when ``source`` is ``message``), a text that is exactly a
    catalog id explains that entry: one hit with ``match`` ``id``, count 0 and the
    template as its text.

    Each line is searched with every entry's regex; a message spanning several lines
    (a pasted multi-line string) is also searched in the lines joined, and reported on
    the lines it actually spans. When nothing matched in
    full (and the text is short), each line is compared with the templates' literal
    text: a shared stretch of 24+ characters is a ``partial`` hit (truncated message).
    """
    catalog = catalog or load_catalog()
    lines = text.splitlines() or [text]
    if by_id is None:
        by_id = source == "message"
    if by_id and text.strip() in {e.id for e in catalog.entries}:
        entry = catalog.get(text.strip())
        hit = Hit(entry_id=entry.id, match="id", text=entry.template.rstrip())
        return Explanation(source=source, lines=len(lines), hits=[hit])
    hits: dict[str, Hit] = {}
    for lineno, line in enumerate(lines, start=1):
        for entry in catalog.entries:
            m = entry.regex.search(line)
            if m is None:
                continue
            _record(hits, entry, lineno, m.group(0), {k: v for k, v in m.groupdict().items() if v is not None})
    if len(lines) > 1:
        joined, starts = _join(lines)
        for entry in catalog.entries:
            if entry.id in hits:
                continue
            for m in entry.regex.finditer(joined):
                first = bisect_right(starts, m.start())
                last = bisect_right(starts, max(m.start(), m.end() - 1))
                _record(hits, entry, first, m.group(0), {k: v for k, v in m.groupdict().items() if v is not None}, last=last)
    if not hits and len(lines) <= _MAX_PARTIAL_LINES:
        for lineno, line in enumerate(lines, start=1):
            best: tuple[int, Entry | None, str] = (0, None, "")
            for entry in catalog.entries:
                for part in entry.literal_parts:
                    m = SequenceMatcher(None, line, part, autojunk=False).find_longest_match(0, len(line), 0, len(part))
                    if m.size > best[0]:
                        best = (m.size, entry, line[m.a : m.a + m.size])
            if best[0] >= _MIN_PARTIAL and best[1] is not None:
                _record(hits, best[1], lineno, best[2].strip(), {}, match="partial")
    ordered = sorted(hits.values(), key=lambda h: (catalog.get(h.entry_id).generic, h.first_line))
    return Explanation(source=source, lines=len(lines), hits=ordered)


def _join(lines: list[str]) -> tuple[str, list[int]]:
    """The lines stripped and joined by one space (a message wrapped over several lines
    reads as one), and the offset in that text where each line starts (line N starts at
    ``starts[N - 1]``), to map a match back to the lines it spans."""
    starts: list[int] = []
    parts: list[str] = []
    offset = 0
    for line in lines:
        starts.append(offset)
        part = line.strip()
        parts.append(part)
        offset += len(part) + 1
    return " ".join(parts), starts


def _record(hits: dict[str, Hit], entry: Entry, lineno: int, text: str, values: dict[str, str], match: str = "full", last: int | None = None) -> None:
    """Count one occurrence of ``entry`` found on lines ``lineno``..``last`` (default: one line)."""
    hit = hits.get(entry.id)
    if hit is None:
        hit = hits[entry.id] = Hit(entry_id=entry.id, match=match, first_line=lineno, text=text, values=values)
    hit.count += 1
    hit.first_line = min(hit.first_line, lineno)
    hit.last_line = max(hit.last_line, last if last is not None else lineno)


def attach_preflight(explanation: Explanation, report, catalog: Catalog | None = None) -> Explanation:
    """Point each hit to the finding of ``report`` (a preflight ``Report``) that predicts
    it, and record the preflight's verdict and findings on the explanation."""
    from kvcheck.preflight import _check_of

    catalog = catalog or load_catalog()
    findings = [f for f in report.findings]
    for hit in explanation.hits:
        entry = catalog.get(hit.entry_id)
        cause = None
        for f in findings:
            rt = f.runtime_error
            if rt is not None and entry.regex.search(rt.message):
                cause = {"finding": f.id, "how": "runtime_error", "message": f.message, "fix": f.fix, "runtime_error": rt.model_dump()}
                break
        if cause is None and entry.check:
            for f in findings:
                if f.id == entry.check or _check_of(f.id) == entry.check:
                    cause = {"finding": f.id, "how": "check", "message": f.message, "fix": f.fix, "runtime_error": f.runtime_error.model_dump() if f.runtime_error else None}
                    break
        hit.cause = cause
    explanation.preflight = {
        "verdict": report.verdict,
        "findings": [f.contract() for f in findings],
        "exit": report.exit_code,
    }
    return explanation


def iter_entries(ids: Iterable[str] | None = None, catalog: Catalog | None = None) -> list[Entry]:
    """Catalog entries, all or those named by ``ids``."""
    catalog = catalog or load_catalog()
    if ids is None:
        return list(catalog.entries)
    return [catalog.get(i) for i in ids]
