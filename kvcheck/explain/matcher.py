"""Recognize runtime messages in a pasted message or a log, and tie them to a preflight.

``explain_text`` finds every catalog entry whose regex matches somewhere in the text,
line by line, with counts and first/last line numbers. ``attach_preflight`` points each
recognized message to the preflight finding that predicts it (the finding whose
``runtime_error`` text the entry's regex matches, else one with the entry's check id).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from kvcheck.explain.catalog import RUNTIME, Catalog, Entry, load_catalog
from kvcheck.explain.engines import ForeignLines
from kvcheck.explain.scan import (
    _MAX_HIT_TEXT,
    _MAX_PARTIAL_LINES,
    _WRAP,
    _field_partial,
    _join,
    _opening,
    _prefix_partial,
    _scanner,
    _uncollect,
)
from kvcheck.explain.scan import _Scanner as _Scanner  # re-exported: tests patch it here
from kvcheck.explain.scan import iter_log_blocks as iter_log_blocks  # re-exported for the CLI

# explain's exit statuses (documented in `kvcheck explain --help`).
EXIT_RECOGNIZED = 0
EXIT_NOT_RECOGNIZED = 1


class Hit(BaseModel):
    """One catalog entry found in the text: how often, where, and the values it carried
    the first time. ``match`` is ``full`` (the template matched) or ``partial`` (only a
    long literal stretch of it was found: a truncated or reworded message) or ``opening``
    (the text pasted alone is the message's first few whole words, distinctive to it:
    ``scan._opening``; lower confidence) or ``id`` (the entry was named by its catalog id:
    no count, no line numbers)."""

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
    # Lines written by other engines or the NIXL/UCX native libraries (kvcheck.explain.engines).
    foreign: list[ForeignLines] = Field(default_factory=list)
    preflight: dict[str, Any] | None = None
    # The whole-log reading (kvcheck.explain.reading): engines and processes, release,
    # phases, signatures, the first cause and what followed.
    report: Any = None
    # the config files given (role -> path), for "change line N of FILE"
    configs: dict[str, str] = Field(default_factory=dict)
    _blank: bool = PrivateAttr(default=False)

    @property
    def blank(self) -> bool:
        """Whether every line read was blank (nothing to explain)."""
        return self._blank

    @property
    def recognized(self) -> bool:
        """Whether something was explained: a catalog message, a known signature, or a
        general rule that reads the line's cause (``reading.Finding.explains``). A line only
        attributed to an engine (a UCX or vLLM line no signature or rule reads, a process
        kvcheck has no formats for) is named, not explained: not recognized."""
        return bool(self.hits) or bool(self.report is not None and any(f.explains for f in self.report.findings))

    @property
    def attributed_only(self) -> list[str]:
        """The names of the engines whose lines were attributed (whose they are) and not
        explained, when nothing was (``recognized`` False); [] otherwise."""
        if self.recognized:
            return []
        if self.report is not None and self.report.engines:
            return [e.name for e in self.report.engines if e.engine not in ("python", "native")]
        return [f.name for f in self.foreign]

    @property
    def exit_code(self) -> int:
        """0 when something was explained (``recognized``), 1 when nothing was (lines only
        attributed to an engine included)."""
        return EXIT_RECOGNIZED if self.recognized else EXIT_NOT_RECOGNIZED

    def contract(self, catalog: Catalog | None = None) -> dict[str, Any]:
        """The JSON form: ``recognized`` (something was explained; the exit status),
        ``attributed_only`` (engines whose lines were named but not explained, when nothing
        was), ``runtime``, ``source``, ``lines``, ``hits`` (each with its catalog entry), and
        ``preflight`` when configs were given."""
        catalog = catalog or load_catalog()
        hits = []
        for h in self.hits:
            d = h.model_dump()
            d["entry"] = catalog.get(h.entry_id).summary()
            hits.append(d)
        return {
            "recognized": self.recognized,
            "attributed_only": self.attributed_only,
            "runtime": self.runtime,
            "release": self.release,
            "release_source": self.release_source,
            "source": self.source,
            "lines": self.lines,
            "hits": hits,
            "foreign": [f.model_dump() for f in self.foreign],
            "report": self.report.model_dump() if self.report is not None else None,
            "preflight": self.preflight,
        }


_FRAME_FUNC = re.compile(r'File "[^"]+"(?:, line \d+)?,? in (\w+)|\bin (\w+)$')
_EXC = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception): ")
_BATCH = 8192  # lines of an iterable handled at a time


def explain_text(
    text: str,
    *,
    source: str = "message",
    catalog: Catalog | None = None,
    by_id: bool | None = None,
    sglang_version: str | None = None,
) -> Explanation:
    """``_explain_text`` (below), then ``annotate_release`` with the release the text
    shows (or ``sglang_version``)."""
    from kvcheck.explain.releases import version_in_log

    catalog = catalog or load_catalog()
    result = _explain_text(text, source=source, catalog=catalog, by_id=by_id)
    return annotate_release(result, sglang_version, version_in_log(text), catalog)


def log_release(result: Explanation, fallback: str | None = None) -> tuple[str | None, str]:
    """(release, where from) the log itself shows: an explicit version, else the newest
    release its traceback lines / server-args dump fit, else ``fallback`` (the older
    version sniffing)."""
    rep = result.report
    if rep is not None:
        r = rep.release
        if r.release:
            return r.release, "the version the log shows"
        if r.candidates:
            span = r.candidates[0] if len(r.candidates) == 1 else f"{r.candidates[0]} .. {r.candidates[-1]}"
            return r.candidates[
                -1
            ], f"the newest release the log's {', '.join(sorted({c.kind for c in r.clues if c.releases}))} fit ({span})"
    return fallback, "the version the log shows"


def annotate_release(
    result: Explanation, sglang_version: str | None, log_version: str | None, catalog: Catalog | None = None
) -> Explanation:
    """Set the release the explanation follows (``sglang_version``, else ``log_version``
    (the version the log shows), else the newest scanned, said as assumed) and,
    for each hit, whether its message exists and is reachable in that release
    (``Hit.release_info``, ``kvcheck.explain.releases``). Returns ``result``."""
    from kvcheck.explain.releases import choose_explain_release, release_info

    catalog = catalog or load_catalog()
    shown, shown_where = log_release(result, log_version)
    release, where = choose_explain_release(shown, sglang_version)
    if shown and not sglang_version and release == shown:
        where = shown_where
    result.release, result.release_source = release, where
    for hit in result.hits:
        hit.release_info = release_info(hit.entry_id, release, catalog.get(hit.entry_id).reachable)
    return result


class VersionSniffer:
    """Wraps an iterator of line blocks (``iter_log_blocks``) and keeps the first SGLang
    release a line names (``version``), without holding the log."""

    def __init__(self, blocks: Iterable[list[str]]):
        self._blocks = blocks
        self.version: str | None = None

    def __iter__(self) -> Iterator[list[str]]:
        from kvcheck.explain.releases import version_in_log

        for block in self._blocks:
            if self.version is None:
                for line in block:
                    found = version_in_log(line)
                    if found:
                        self.version = found
                        break
            yield block


def _explain_text(
    text: str, *, source: str = "message", catalog: Catalog | None = None, by_id: bool | None = None
) -> Explanation:
    """Find every catalog message in ``text`` (a message or a whole log).

    With ``by_id`` (default: when ``source`` is ``message``), a text that is exactly a
    catalog id explains that entry: one hit with ``match`` ``id``, count 0 and the
    template as its text. Otherwise ``explain_lines`` on the text's lines.
    """
    catalog = catalog or load_catalog()
    lines = text.splitlines() or [text]
    if by_id is None:
        by_id = source == "message"
    if by_id and text.strip() in {e.id for e in catalog.entries}:
        entry = catalog.get(text.strip())
        hit = Hit(entry_id=entry.id, match="id", text=entry.template.rstrip())
        return Explanation(source=source, lines=len(lines), hits=[hit])
    return explain_lines(lines, source=source, catalog=catalog)


def explain_lines(lines: Iterable[str], *, source: str = "log", catalog: Catalog | None = None) -> Explanation:
    """Find every catalog message in an iterable of lines; see ``explain_blocks``."""
    from itertools import islice

    from kvcheck.sources.limits import MAX_LOG_LINE

    it = iter(lines)

    def batches() -> Iterator[list[str]]:
        while True:
            batch = list(islice(it, _BATCH))
            if not batch:
                return
            if max(map(len, batch)) > MAX_LOG_LINE:
                batch = [ln[:MAX_LOG_LINE] for ln in batch]
            yield batch

    return explain_blocks(batches(), source=source, catalog=catalog)


def explain_blocks(blocks: Iterable[list[str]], *, source: str = "log", catalog: Catalog | None = None) -> Explanation:
    """Find every catalog message in a stream of line blocks (``iter_log_blocks``), in
    one pass, in time linear in the text and memory bounded by a block (a 200 MB log
    or one 1 MB line alike; lines arrive cut to ``MAX_LOG_LINE`` characters).

    A line is a candidate for the entries whose token it holds (``_Scanner``); only
    those entries' regexes run on it. A candidate that does not match on the line alone
    is searched in the line joined with up to ``_WRAP`` lines on each side (a message
    wrapped over several lines) and reported on the lines it actually spans. When
    nothing matched in full and the text has at most 50 lines (a pasted message), each
    line is compared with the templates' literal text: a shared stretch of 24+
    characters is a ``partial`` hit. ``Explanation.lines`` counts the lines;
    ``Explanation.blank`` says whether all were blank.
    """
    from kvcheck.explain.prefixes import Paste
    from kvcheck.explain.reading import LogReader

    catalog = catalog or load_catalog()
    scanner = _scanner(catalog)
    paste = Paste()
    tokens, sub_re = scanner.tokens, scanner.sub_re
    reader = LogReader()
    hits: dict[str, Hit] = {}
    foreign: dict[str, ForeignLines] = {}
    spans: set[tuple[str, int, int]] = set()
    line_info: dict = {}  # attribution of candidate lines in the current block
    full_lines: set[int] = set()  # lines (of the first 50) a message matched in full
    head: list[str] = []
    count = 0
    blank = True

    def process(buf: list[str], base: int, i: int) -> None:
        line, lineno = buf[i], base + i
        for entry in scanner.candidates(line):
            m = entry.regex.search(line)
            if m is not None:
                if lineno <= _MAX_PARTIAL_LINES:
                    full_lines.add(lineno)
                if entry.id not in hits and lineno in line_info:
                    reader.hit_info[lineno] = line_info[lineno]
                _record(hits, entry, lineno, m.group(0), {k: v for k, v in m.groupdict().items() if v is not None})
                continue
            lo, hi = max(0, i - _WRAP), min(len(buf), i + _WRAP + 1)
            if hi - lo < 2:
                continue
            joined, starts = _join(buf[lo:hi])
            first_no = base + lo
            for mm in entry.regex.finditer(joined):
                first = first_no + bisect_right(starts, mm.start()) - 1
                last = first_no + bisect_right(starts, max(mm.start(), mm.end() - 1)) - 1
                if first == last or not first <= lineno <= last or (entry.id, first, last) in spans:
                    continue
                spans.add((entry.id, first, last))
                full_lines.update(n for n in range(first, last + 1) if n <= _MAX_PARTIAL_LINES)
                _record(
                    hits,
                    entry,
                    first,
                    mm.group(0),
                    {k: v for k, v in mm.groupdict().items() if v is not None},
                    last=last,
                )

    def scan(buf: list[str], base: int, start: int, end: int) -> None:
        if start >= end:
            return
        window = buf[start:end]
        skip: set[int] = set()
        for k, ln in enumerate(window):
            info = reader.feed(base + start + k, ln, roles[start + k])
            if not reader.catalog_allowed(info):
                skip.add(start + k)
            elif info.engine or info.host:
                line_info[base + start + k] = info
        idx = [start + k for k, ln in enumerate(window) if not tokens.isdisjoint(ln.split())] if tokens else []
        if sub_re is not None or scanner.match_all:
            if scanner.match_all:
                extra: Iterable[int] = range(start, end)
            elif sub_re is not None and sub_re.search("\n".join(window)):  # one pass over the block first
                extra = [start + k for k, ln in enumerate(window) if sub_re.search(ln)]
            else:
                extra = ()
            idx = sorted(set(idx).union(extra))
        for i in idx:
            if i not in skip:
                process(buf, base, i)

    buf: list[str] = []
    roles: list[str] = []  # per line of buf: the role its collector prefix named ('' none)
    base = 1  # line number of buf[0]
    start = 0  # index in buf of the first line not yet scanned
    for block, block_roles in _shaped(blocks, paste):
        if not block:
            continue
        if count < _MAX_PARTIAL_LINES:
            head.extend(block[: _MAX_PARTIAL_LINES - count])
        if blank and any(ln.strip() for ln in block):
            blank = False
        count += len(block)
        buf.extend(block)
        roles.extend(block_roles)
        end = len(buf) - _WRAP  # lines with _WRAP lines of context after them
        scan(buf, base, start, end)
        line_info.clear()
        nxt = max(start, end)  # the first line not scanned yet
        keep = max(0, nxt - _WRAP)  # drop what is not context for it
        base += keep
        start = nxt - keep
        del buf[:keep]
        del roles[:keep]
    scan(buf, base, start, len(buf))
    if count == 0:
        head, count = [""], 1
    if not reader.engines_other_than_sglang() and count <= _MAX_PARTIAL_LINES:
        # a pasted message cut short or pasted from its middle: the template's leading
        # text to the end of the line, or a field with its literal text around it; never
        # a stretch of words alone. Only on lines no message matched in full: any line of
        # a lone paste, the exception line of a traceback otherwise. Several templates
        # sharing that text are told apart by the traceback's functions (their sources).
        funcs = {m.group(1) or m.group(2) for ln in head for m in _FRAME_FUNC.finditer(ln)}
        lone = not hits and not reader.sigs.hits
        for lineno, line in enumerate(head, start=1):
            if lineno in full_lines or not (lone or _EXC.match(line)):
                continue
            found = [(got, e) for e in catalog.entries if (got := _prefix_partial(line, e) or _field_partial(line, e))]
            if not found:
                opening = _opening(line, catalog) if lone else None
                if opening is not None:  # a distinctive opening pasted alone: lower confidence
                    _record(hits, opening[1], lineno, opening[0], {}, match="opening")
                continue
            if _whole_format(line, [e for _, e in found]):
                continue  # the line is another message, whole: a stretch it shares with an entry is not that entry
            if len(found) > 1 and funcs:
                by_frame = [
                    (g, e)
                    for g, e in found
                    if any(src.qualname and src.qualname.split(".")[-1] in funcs for src in e.sources)
                ]
                found = by_frame or found
            got, entry = max(found, key=lambda ge: len(ge[0]))
            _record(hits, entry, lineno, got.strip(), {}, match="partial")
    ordered = sorted(hits.values(), key=lambda h: (catalog.get(h.entry_id).generic, h.first_line))
    for e in reader.engines.values():
        if e.engine not in ("sglang", "python", "native"):
            foreign[e.engine] = ForeignLines(
                engine=e.engine,
                name=e.name,
                meaning=e.support,
                count=e.count,
                first_line=e.first_line,
                last_line=e.last_line,
                example=e.example,
            )
    result = Explanation(
        source=source, lines=count, hits=ordered, foreign=sorted(foreign.values(), key=lambda f: f.first_line)
    )
    if paste.moved:
        reader.pasted = reader.generic.pasted = paste.pasted_line
    result.report = reader.report(ordered, catalog)
    result._blank = blank
    if paste.moved:
        result.lines = paste.consumed
        _to_paste_lines(result, paste.pasted_line)
    return result


def _shaped(blocks: Iterable[list[str]], paste: Any) -> Iterator[tuple[list[str], list[str]]]:
    """Each block as read (``scan._uncollect``), then what the paste held back at the end."""
    for block in blocks:
        if block:
            yield _uncollect(block, paste)
    yield paste.flush()


def _to_paste_lines(result: Explanation, pasted: Callable[[int], int]) -> None:
    """Every line number of ``result`` (hits, engines, findings, the timeline, release
    clues) as the paste's: ``pasted`` maps a line as read to the paste's line
    (``prefixes.Paste.pasted_line``). A span whose lines were reordered (processes read
    one by one) becomes the lowest to the highest of its ends."""

    def span(obj: Any) -> None:
        if obj.first_line > 0:
            a, b = pasted(obj.first_line), pasted(max(obj.last_line, obj.first_line))
            obj.first_line, obj.last_line = min(a, b), max(a, b)

    for hit in result.hits:
        span(hit)
    for f in result.foreign:
        span(f)
    rep = result.report
    if rep is None:
        return
    for e in rep.engines:
        span(e)
    seen: set[int] = set()
    for f in [*rep.findings, *rep.then, *([rep.first_cause] if rep.first_cause is not None else [])]:
        if id(f) not in seen:
            seen.add(id(f))
            span(f)
    for t in rep.timeline:
        if isinstance(t.get("line"), int) and t["line"] > 0:
            t["line"] = pasted(t["line"])
    for c in rep.release.clues:
        if c.line > 0:
            c.line = pasted(c.line)


def _whole_format(line: str, entries: list[Entry]) -> bool:
    """Whether ``line`` is, whole, a message format of some SGLang release other than the
    ``entries`` a stretch of it partly matches (``formats``)."""
    from kvcheck.explain.formats import load_formats

    fm = load_formats().match(line)
    if fm is None or fm.truncated:  # a message cut short is no whole message of its own
        return False
    return not any(fm.text in e.template or e.regex.search(fm.text) for e in entries)


def _record(
    hits: dict[str, Hit],
    entry: Entry,
    lineno: int,
    text: str,
    values: dict[str, str],
    match: str = "full",
    last: int | None = None,
) -> None:
    """Count one occurrence of ``entry`` found on lines ``lineno``..``last`` (default: one line)."""
    hit = hits.get(entry.id)
    if hit is None:
        if len(text) > _MAX_HIT_TEXT:  # a message whose trailing field took a whole cut line
            text = text[: _MAX_HIT_TEXT - 1] + "…"
        values = {k: (v if len(v) <= _MAX_HIT_TEXT else v[: _MAX_HIT_TEXT - 1] + "…") for k, v in values.items()}
        hit = hits[entry.id] = Hit(entry_id=entry.id, match=match, first_line=lineno, text=text, values=values)
    hit.count += 1
    hit.first_line = min(hit.first_line, lineno)
    hit.last_line = max(hit.last_line, last if last is not None else lineno)


def attach_preflight(explanation: Explanation, report, catalog: Catalog | None = None) -> Explanation:
    """Point each hit to the finding of ``report`` (a preflight ``Report``) that predicts
    it, and record the preflight's verdict and findings on the explanation."""
    findings = [f for f in report.findings]
    rows = [
        {
            "id": f.id,
            "message": f.message,
            "fix": f.fix,
            "runtime_error": f.runtime_error.model_dump() if f.runtime_error is not None else None,
        }
        for f in findings
    ]
    _point_hits(explanation, rows, catalog)
    explanation.preflight = {
        "verdict": report.verdict,
        "findings": [f.contract() for f in findings],
        "exit": report.exit_code,
    }
    return explanation


def _point_hits(explanation: Explanation, findings: list[dict], catalog: Catalog | None) -> None:
    """Set each hit's ``cause``: the preflight finding (``id``, ``message``, ``fix``,
    ``runtime_error`` as a dict) whose runtime error text the entry's regex matches, else
    the one with the entry's check id."""
    from kvcheck.checks.ids import check_of as _check_of

    catalog = catalog or load_catalog()
    for hit in explanation.hits:
        entry = catalog.get(hit.entry_id)
        cause = None
        for f in findings:
            rt = f.get("runtime_error") or {}
            if isinstance(rt, dict) and rt.get("message") and entry.regex.search(rt["message"]):
                cause = _cause_row(f, "runtime_error", rt)
                break
        if cause is None and entry.check:
            for f in findings:
                if f["id"] == entry.check or _check_of(f["id"]) == entry.check:
                    cause = _cause_row(f, "check", f.get("runtime_error"))
                    break
        hit.cause = cause


def _cause_row(f: dict, how: str, runtime_error: Any) -> dict[str, Any]:
    return {
        "finding": f["id"],
        "how": how,
        "message": f["message"],
        "fix": f.get("fix", ""),
        "runtime_error": runtime_error,
    }


def _walk_findings(node: Any, out: list[dict]) -> None:
    """Every finding-shaped dict (an ``id`` and a ``message``) in a report contract."""
    if isinstance(node, dict):
        if isinstance(node.get("id"), str) and "message" in node and "severity" in node:
            out.append(node)
        for v in node.values():
            _walk_findings(v, out)
    elif isinstance(node, list):
        for v in node:
            _walk_findings(v, out)


def attach_deployment_preflight(explanation: Explanation, report: Any, catalog: Catalog | None = None) -> Explanation:
    """As ``attach_preflight`` for ``explain -f``: the deployment's preflight report
    (``kvcheck.cluster``) is read through its documented contract; each hit points to the
    finding that predicts it (runtime error text, else the check id)."""
    contract = report.contract()
    findings: list[dict] = []
    _walk_findings(contract, findings)
    _point_hits(explanation, findings, catalog)
    explanation.preflight = {
        "verdict": contract.get("verdict"),
        "findings": findings,
        "exit": getattr(report, "exit_code", None),
    }
    return explanation
