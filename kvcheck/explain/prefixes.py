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
