"""What the log collector put in front of each line, taken off before the line is read.

A pasted log is rarely the process's own output: ``kubectl logs --timestamps`` puts an
RFC 3339 time in front of every line, ``docker compose logs`` the service name and a
``|``, ``grep -H`` the file name and a ``:``,
journald the date, host and unit, ``srun --label`` / ``pdsh`` the rank or host, a
GitHub reply quotes with ``>``, and terminals keep the ANSI colour codes. Every format
kvcheck reads (SGLang's ``[time TPn]``, vLLM's ``(Worker pid=N)``, glog, UCX, tracebacks)
starts at column 0, so with such a prefix nothing is attributed and tracebacks are not
read. ``strip_collector`` removes these prefixes (each collector's documented format, and
only when what remains still reads as a log line where the label is ambiguous) and returns
the process role the label names (``sglang-decode-1 | ...`` -> decode).
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LEVELS = r"(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)"
# one prefix, anchored at the line's start; the group ``svc`` (when present) names the
# container / pod / host, which may say the role
_COLLECTOR = re.compile(
    # kubectl logs --timestamps (RFC 3339, nanoseconds); not Dynamo's own tracing format
    # (``2025-04-26T20:46:29.907Z ERROR engine.start: msg``, ``... [INFO] [cli] msg``)
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?!\s*" + _LEVELS + r"\s+[\w.:<>]+: |\["
    r"(?:INFO|WARNING|ERROR|DEBUG)\] \[)"
    # docker compose logs: ``service-1  | msg``
    r"|(?P<svc>[A-Za-z][\w.-]*) +\| ?"
    # journald / syslog: ``Feb 11 08:15:00 host unit[pid]: msg``
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?P<host>[\w.-]+) [\w./@-]+(?:\[\d+\])?: "
    # a role label in brackets: ``[decode-0] msg`` (kubectl logs --prefix: ``[pod/decode-0/c] msg``)
    r"|\[(?:pod/)?(?P<role>[\w.-]*(?:prefill|decode|router)[\w./-]*)\] "
    # grep -H / -n over log files: ``decode_0.log:`` / ``prefill.log:1234:``
    r"|(?P<gfile>[\w.-]+\.(?:log|txt|out|err)(?:\.\d+)?):(?:\d+[:-])?(?=\S)"
    # a launcher's stream label (``[PYTHON3] ``, ``[stderr] ``) and a terminal UI's frame (``│ ``)
    r"|\[(?:PYTHON\d?|STDOUT|STDERR|stdout|stderr)\] ?|[│┃] ?"
    # a GitHub reply's quote
    r"|> ?",
    re.I,
)
# ambiguous labels (srun --label ``0: ``, pdsh ``host: ``): taken off only when what
# follows is a log line's own start
_LABEL = re.compile(
    r"(?P<lab>(?![\w.]*(?:Error|Exception|Warning|Exit)\b)[\w.-]{1,40}): (?=\[\d{4}-\d\d-\d\d|\(\w[\w ]* "
    r"pid=\d+|Traceback \(|\s+File \"|" + _LEVELS + r" \d\d-\d\d |[EWIF]\d{4} |\[[\w.-]+:\d+:)"
)
_ROLE = re.compile(r"prefill|decode|router", re.I)
# a first character any prefix above can start with (one test per line before the regex)
_STARTS = frozenset("0123456789>ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz[│┃")
_OWN = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* +" + _LEVELS + r"\s")


# GitHub's escaping of a pasted "]" ("[TensorRT-LLM[][ERROR[] ..."): "[x[]" is "[x]"
_GH_BRACKET = re.compile(r"\[([^\[\]]+)\[\]")


def strip_collector(line: str) -> tuple[str, str]:
    """``line`` without the collectors' prefixes and ANSI codes, and the role
    (prefill/decode/router, or '') the prefix's label names."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "[]" in line:
        line = _GH_BRACKET.sub(r"[\1]", line)
    if line.endswith(("│", "┃", "│ ")):  # the right border of a terminal UI's frame
        line = line.rstrip(" │┃").rstrip()
    if not line or line[0] not in _STARTS or _OWN.match(line):
        return line, ""
    role = ""
    for _ in range(3):  # at most three stacked prefixes (kubectl time + compose + quote)
        m = _COLLECTOR.match(line)
        if m is None or not m.end():
            m = _LABEL.match(line)
            if m is None:
                break
            label = m.group("lab")
        else:
            label = m.group("svc") or m.group("host") or m.group("role") or m.group("gfile") or ""
        if not role and label:
            r = _ROLE.search(label)
            if r:
                role = r.group(0).lower()
        line = line[m.end() :]
        if not line or line[0] not in _STARTS or _OWN.match(line):
            break
    return line, role


# ------------------------------------------------------------------ tracebacks as pasted
# A traceback pasted into an issue or a chat is rarely as Python printed it:
#   - a narrow terminal or an editor wraps a long frame: ``File "<path>", line 476,`` then
#     ``  in fused_experts`` (or the path itself over two lines);
#   - a reply elides the frames' directories (``File ".../disaggregation/mooncake/conn.py"``,
#     ``…/common/utils.py``) and drops the line numbers (``File "<path>", in f``);
#   - Windows paths use ``\``.
# ``mend_tracebacks`` puts such frames back in Python's own form (``traceback.format_list``:
# ``  File "<path>", line N, in <func>``) so that every reader (engine, release, the fixed
# bugs) reads the frame: a wrapped frame is joined on its first line (the second becomes
# blank, so line numbers stay), and an elided path whose tail names exactly one file of
# SGLang's package (any release kvcheck indexed, ``release_index.json``) is given that
# file's ``sglang/srt/...`` path. The line number is not invented: a frame without one
# stays without one (the readers accept ``File "p", in f``).
_FRAME_HEAD = re.compile(r'File "[^"\n]*"(?:, line \d+)?,?\s*$')  # a frame cut before its function
_FRAME_TAIL = re.compile(r"^\s*((?:line \d+,?\s+)?in [\w<>.]+)\s*$")
_FRAME_HEAD_IN = re.compile(r'File "[^"\n]*"(?:, line \d+)?,? in\s*$')  # cut between "in" and the function
_FUNC_TAIL = re.compile(r"^\s*([\w<>.]+)\s*$")
_PATH_HEAD = re.compile(r'File "[^"\n]*$')  # a frame cut inside its path
_PATH_TAIL = re.compile(r'^\s*([^"\s]*", (?:line \d+,? )?in [\w<>.]+.*)$')
# the prefixes a process puts on each line of its traceback (SGLang's ``[time TPn]``,
# vLLM's ``(Worker pid=N)``, a level and time): the wrapped part carries them too
_LINE_PREFIX = re.compile(
    r"^(?:\s*\((?:[A-Za-z][\w.]*(?:[ _][\w=.]+)*? )?pid=\d+(?:, ip=[\d.]+)?\)|\s*\[\d{4}-\d\d-\d\d[^\]]{0,40}\])+\s*"
)
_ELIDED = re.compile(r'(File ")(?:\.\.\.|…)[/\\](?P<tail>[\w/\\.-]+\.py)(")')
# a frame whose opening the paste cut (``  model_runner.py", line 397, in __init__``: ``File "``
# and the path's head gone): the frame as Python prints it, with the path it still shows
_CUT_FRAME = re.compile(r'^(?P<indent>\s*)(?P<path>[\w./\\-]*\w\.py)", line (?P<line>\d+), in (?P<func>[\w<>.]+)\s*$')


def _sglang_tail(tail: str) -> str:
    """The one ``srt/...py`` of SGLang's package (any indexed release) ending with
    ``tail`` (at least two path parts), or ''."""
    tail = tail.replace("\\", "/").lstrip("/")
    if tail.count("/") < 1:
        return ""
    hits = {f for f in _srt_files() if f == tail or f.endswith("/" + tail)}
    return hits.pop() if len(hits) == 1 else ""


_SRT_FILES: frozenset[str] | None = None


def _srt_files() -> frozenset[str]:
    global _SRT_FILES
    if _SRT_FILES is None:
        from kvcheck.explain.logrelease import load_index

        files = load_index()["files"]
        _SRT_FILES = frozenset(f for per in files.values() for f in per)
    return _SRT_FILES


def mend_tracebacks(lines: list[str]) -> list[str]:
    """``lines`` (already without collectors' prefixes) with each wrapped or elided
    traceback frame put back in Python's form (see above); the same number of lines.
    Cheap: a line without ``File "`` (or a wrapped frame's tail) is not looked at twice."""
    out = list(lines)
    n = len(out)
    for i, ln in enumerate(out):
        if 'File "' not in ln:
            if '", line ' in ln:
                c = _CUT_FRAME.match(ln)
                if c:
                    out[i] = (
                        f'{c.group("indent")}File "{c.group("path")}", line {c.group("line")}, in {c.group("func")}'
                    )
            continue
        if i + 1 < n:
            nxt = _LINE_PREFIX.sub("", out[i + 1], count=1)
            if _FRAME_HEAD_IN.search(ln):
                t = _FUNC_TAIL.match(nxt)
                if t:
                    ln = ln.rstrip() + " " + t.group(1)
                    out[i + 1] = ""
            elif _FRAME_HEAD.search(ln):
                t = _FRAME_TAIL.match(nxt)
                if t and "File " not in nxt:
                    ln = ln.rstrip().rstrip(",") + ", " + t.group(1)
                    out[i + 1] = ""
            elif _PATH_HEAD.search(ln):
                t = _PATH_TAIL.match(nxt)
                if t:
                    ln = ln.rstrip() + t.group(1)
                    out[i + 1] = ""
        if "..." in ln or "…" in ln:
            m = _ELIDED.search(ln)
            if m:
                full = _sglang_tail(m.group("tail"))
                if full:
                    ln = ln[: m.start()] + f'File ".../sglang/{full}"' + ln[m.end() :]
        out[i] = ln
    return out
