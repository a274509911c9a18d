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

import json
import re
from array import array
from bisect import bisect_right

from kvcheck.sources.limits import MAX_LOG_LINE

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
    # journald / syslog: ``Feb 11 08:15:00 host unit[pid]: msg`` (the label: host, unit and pid)
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?P<host>[\w.-]+ [\w./@-]+(?:\[\d+\])?): "
    # a role label in brackets: ``[decode-0] msg`` (kubectl logs --prefix: ``[pod/decode-0/c] msg``)
    r"|\[(?:pod/)?(?P<role>[\w.-]*(?:prefill|decode|router)[\w./-]*)\] "
    # kubectl logs --prefix, any pod: ``[pod/NAME/CONTAINER] msg``
    r"|\[pod/(?P<pod>[\w.-]+)/[\w.-]+\] "
    # Ray's worker prefix on a multi-node cluster: ``(ActorName pid=N, ip=A) msg`` (the
    # process's own prefix has no ``ip=``: vLLM's ``(EngineCore_DP0 pid=N)`` stays)
    r"|\((?P<ray>[A-Za-z_][\w.]* pid=\d+), ip=[\d.]+\) "
    # grep -H / -n over log files: ``decode_0.log:`` / ``prefill.log:1234:``
    r"|(?P<gfile>[\w.-]+\.(?:log|txt|out|err)(?:\.\d+)?):(?:\d+[:-])?(?=\S)"
    # a launcher's stream label (``[PYTHON3] ``, ``[stderr] ``) and a terminal UI's frame (``│ ``)
    r"|\[(?:PYTHON\d?|STDOUT|STDERR|stdout|stderr)\] ?|[│┃] ?"
    # a GitHub reply's quote (nested quotes, a REPL's ``>>> ``, as one prefix)
    r"|(?:> ?)+",
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
_STARTS = frozenset("0123456789>ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz[│┃(")
# a line in its process's own format: SGLang's ``[time ...]``, Dynamo's tracing ``time LEVEL
# target: `` (not a collector's time before vLLM's ``LEVEL MM-DD hh:mm:ss``)
_OWN = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* +" + _LEVELS + r"\s(?!\d\d-\d\d \d\d:)"
)


# GitHub's escaping of a pasted "]" ("[TensorRT-LLM[][ERROR[] ..."): "[x[]" is "[x]"
_GH_BRACKET = re.compile(r"\[([^\[\]]+)\[\]")


def strip_collector(line: str) -> tuple[str, str]:
    """``line`` without the collectors' prefixes and ANSI codes, and the role
    (prefill/decode/router, or '') the prefix's label names."""
    got, role, _ = strip_collector_label(line)
    return got, role


def strip_collector_label(line: str) -> tuple[str, str, str]:
    """``strip_collector``, and the label the prefixes named (the pod, service, host,
    Ray actor or task: '' when none), which tells interleaved processes apart."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "[]" in line:
        line = _GH_BRACKET.sub(r"[\1]", line)
    if line.endswith(("│", "┃", "│ ")):  # the right border of a terminal UI's frame
        line = line.rstrip(" │┃").rstrip()
    if not line or line[0] not in _STARTS or _OWN.match(line):
        return line, "", ""
    role = name = ""
    for _ in range(3):  # at most three stacked prefixes (kubectl time + compose + quote)
        m = _COLLECTOR.match(line)
        if m is None or not m.end():
            m = _LABEL.match(line)
            if m is None:
                break
            label = m.group("lab")
        else:
            label = (
                m.group("svc")
                or m.group("host")
                or m.group("role")
                or m.group("pod")
                or m.group("ray")
                or m.group("gfile")
                or ""
            )
        if label:
            name = name or label
            if not role:
                r = _ROLE.search(label)
                if r:
                    role = r.group(0).lower()
        line = line[m.end() :]
        if not line or line[0] not in _STARTS or _OWN.match(line):
            break
    return line, role, name


# ------------------------------------------------------------------ a paste's shape
# What a whole paste (not one line) shows about how it was taken, read from its first
# block of lines and kept for the rest of the log (``Paste``):
#   - a log shipper's JSON, one object per line: docker's json-file driver
#     (``{"log": "...\\n", "stream": ..., "time": ...}``), fluent-bit / Vector / Loki /
#     CloudWatch exports (``message``, ``msg``, ``line``, journald's ``MESSAGE``), the pod
#     under ``kubernetes.pod_name`` or ``pod``; or one indented JSON document whose events
#     each hold a ``"message": "..."`` line (``aws logs filter-log-events``);
#   - a markdown code fence around the log;
#   - a terminal's hard wrap: lines cut at the same width W, many distinct lines exactly W
#     long, none longer, and far fewer just short of W (a natural log has no such spike);
#   - ``cat -n`` / ``nl`` numbers (``%6d\\t``, consecutive);
#   - the same indentation on every line (a markdown code block, a quoted e-mail);
#   - ``srun --label`` task numbers (``12: ``) on most lines, whatever follows them;
#   - several processes interleaved line by line (two ``srun`` tasks, ``kubectl logs
#     --prefix`` over several pods, ``docker compose logs`` of several services): their
#     lines are read process by process (in the order each first appears), so that one
#     process's traceback is not cut by another's lines.
# Then each line's collector prefixes (``strip_collector_label``) and the tracebacks as
# pasted (``mend_tracebacks``). A line that the shape takes apart or drops (a wrapped
# line's continuation, a fence, a JSON document's other fields) leaves the block: line
# numbers are those of the log as read.
_FENCE = re.compile(r"^\s*(?:```|~~~)[\w.+-]*\s*$")
_JSON_TEXT_KEYS = ("log", "message", "msg", "line", "MESSAGE", "textPayload")
_JSON_DOC_TEXT = re.compile(r'^\s*"(?:log|message|msg|line|MESSAGE|textPayload)"\s*:\s*("(?:[^"\\]|\\.)*")\s*,?\s*$')
_JSON_DOC_OTHER = re.compile(
    r'^\s*(?:[\[\]{}],?|"[\w.@$-]+"\s*:\s*(?:[\[{]|\[\],?|\{\},?|-?[\d.eE+-]+,?|"(?:[^"\\]|\\.)*",?|true,?|false,?|null,?))\s*$'
)
# the fields a shipper puts around the text (docker, fluent-bit, Vector, Loki, CloudWatch,
# Google Cloud Logging, journald's JSON, whose own fields all start with "_" and its user
# fields are upper case): an object with any other field is an application's structured line
_JSON_ENVELOPE = frozenset(
    "stream time timestamp ts date @timestamp time_local level severity kubernetes labels label logStreamName "
    "logGroupName eventId ingestionTime host hostname pod pod_name namespace container container_name "
    "container_id container_created_at image source source_type tag attrs file filename offset job service "
    "resource logName receiveTimestamp insertId SYSLOG_IDENTIFIER SYSLOG_FACILITY SYSLOG_PID PRIORITY "
    "CODE_FILE CODE_LINE CODE_FUNC".split()
)
_NUMBER_START = frozenset(" 0123456789")
_CAT_N = re.compile(r"^ *(\d+)\t")
_TASK = re.compile(r"^ *(\d{1,5}): ")
_MIN_WRAP = 40  # a hard wrap narrower than this is not taken for one
_MAX_MOVES = 1 << 20  # points of the line map kept (16 bytes each)
_MIN_ODD_WRAP = 60  # nor one at an unusual width narrower than this
_WIDTHS = frozenset({80, 100, 120, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256})  # terminals' usual widths
# how a line of a log starts (a wrapped line's rest does not, but for chance): a time, a
# bracket, a level, a glog letter, a traceback's parts, indentation, a process prefix
_LINE_START = re.compile(
    r"^(?:\s\s|\t|\[|\(|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} [ \d]\d |" + _LEVELS + r"\b|[IWEF]\d{4} |Traceback \(|"
    r"[\w.]+(?:Error|Exception|Warning)(?::|$)|File \"|During handling|The above exception|\d{1,5}: |[$#>|{])"
)


def _json_line(line: str) -> tuple[list[str], str] | None:
    """The text lines and the label (pod/container/stream name) of a log shipper's JSON
    object, or None when ``line`` is no such object."""
    s = line.strip()
    if not (s.startswith("{") and s.endswith("}") and '"' in s):
        return None
    try:
        d = json.loads(s)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    if not isinstance(d, dict):
        return None
    text = next((v for k in _JSON_TEXT_KEYS if isinstance(v := d.get(k), str)), None)
    if text is None or any(k not in _JSON_ENVELOPE and k not in _JSON_TEXT_KEYS and k[:1] != "_" for k in d):
        return None  # an application's own structured line (its other fields say more)
    k8s: dict = d["kubernetes"] if isinstance(d.get("kubernetes"), dict) else {}
    labels: dict = d["labels"] if isinstance(d.get("labels"), dict) else {}
    label = next(
        (
            v
            for v in (
                k8s.get("pod_name"),
                d.get("pod"),
                d.get("pod_name"),
                labels.get("pod"),
                d.get("container_name"),
                d.get("logStreamName"),
                d.get("_SYSTEMD_UNIT"),
            )
            if isinstance(v, str) and v
        ),
        "",
    )
    return text.rstrip("\n").replace("\r\n", "\n").split("\n"), label


def _wrap_width(lines: list[str]) -> tuple[int, bool]:
    """The width W the block was hard-wrapped at and whether the block proves it (see
    above, and most W-lines cut inside the text: ``_cut_inside``), or (0, False).
    Unproven: W is the longest line and a terminal's usual width (or any width 60 or
    more that two distinct lines reach exactly: a resized window); a line is then joined
    only where its cut is inside a word (proven: unless the next starts as a line does)."""
    lengths: dict[int, int] = {}
    for ln in lines:
        if ln:
            lengths[len(ln)] = lengths.get(len(ln), 0) + 1
    if not lengths:
        return 0, False
    w = max(lengths)
    if w < _MIN_WRAP:
        return 0, False
    at_w = {ln for ln in lines if len(ln) == w}
    # lines padded to one width (a terminal UI's frame, a table) end in spaces or a border
    if 2 * sum(ln[-1] in "│┃|" or ln.endswith("  ") for ln in at_w) >= len(at_w):
        return 0, False
    near = sum(lengths.get(w - k, 0) for k in range(1, 6))
    if len(at_w) >= 3 and lengths[w] > 2 * near:
        # and most cuts fall inside a line's text (lines of one length that are whole lines,
        # the same message with other numbers, are followed by a line's start)
        cuts = [_cut_inside(a, b) for a, b in zip(lines, lines[1:], strict=False) if len(a) == w]
        if 2 * sum(cuts) > len(cuts):
            return w, True
    # unproven: a usual width, or any width two distinct lines reach exactly, where one
    # cut at least reads as inside the text
    if not (w in _WIDTHS or (w >= _MIN_ODD_WRAP and len(at_w) >= 2)):
        return 0, False
    if not any(_cut_inside(a, b, word=True) for a, b in zip(lines, lines[1:], strict=False) if len(a) == w):
        return 0, False
    return w, False


# around a cut inside the text: what a line cannot start with after a word (``size`` /
# ``:3607``), what it cannot end with before one (``addr=`` / ``0x7f``)
_CUT_AFTER = frozenset(":,;.)]}=/-")
_CUT_BEFORE = frozenset("([{=/-")


def _starts_line(head: str, rest: str) -> bool:
    """Whether ``rest`` (the line after ``head``) starts as a log line does: a line start
    (``_LINE_START``), a collector's prefix, or the same first six characters as ``head``
    (two lines of one format)."""
    if _LINE_START.match(rest) or (len(rest) >= 6 and rest[:6] == head[:6]):
        return True
    m = _COLLECTOR.match(rest)
    return m is not None and m.end() > 0


def _cut_inside(head: str, rest: str, word: bool = False) -> bool:
    """Whether ``rest`` reads as the rest of ``head`` cut by a terminal: not between two
    spaces (``word``, the test of an unproven wrap: inside a word, or at one space) and
    ``rest`` does not start as a log line does."""
    if not rest or not head:
        return False
    if word:
        a, b = head[-1], rest[0]
        one_before = a == " " and not head[-2:-1].isspace() and not b.isspace()
        one_after = b == " " and not rest[1:2].isspace() and not a.isspace()
        inside = (
            _is_word(a)
            and (_is_word(b) or b in _CUT_AFTER)
            or a in _CUT_BEFORE
            and _is_word(b)
            or a == "."
            and (b.isdigit() or b.islower())
            or a == ":"
            and b.isdigit()
        )
        if not (one_before or one_after or inside):
            return False
    elif head[-1].isspace() and rest[0].isspace():
        return False
    return not _starts_line(head, rest)


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _numbered(lines: list[str], rx: re.Pattern[str], consecutive: bool) -> bool:
    """Whether most non-blank lines start with ``rx``'s number (consecutive ones, for
    ``cat -n``)."""
    body = [ln for ln in lines if ln and not ln.isspace()]
    if len(body) < 2 or 5 * sum(ln[:1] in _NUMBER_START for ln in body) < 4 * len(body):
        return False
    nums = [m.group(1) for ln in body if (m := rx.match(ln))]
    if len(nums) < 0.8 * len(body):
        return False
    if not consecutive:
        return True
    steps = sum(int(b) == int(a) + 1 for a, b in zip(nums, nums[1:], strict=False))
    return steps >= 0.8 * (len(nums) - 1)


class Paste:
    """How a paste was taken (module comment above), read from its first block; one per
    log. ``block(lines)`` returns the block's lines as the processes printed them and, per
    line, the role its collector's label named. ``pasted_line(n)`` is the line of the paste
    that line ``n`` as read (1-based, counted over all blocks) starts on: where a shape
    removed lines (an unwrapped line's rest, a fence, a JSON document's other fields) or
    reordered them (interleaved processes), explain's line numbers are mapped back with it
    (``moved`` says whether any line moved). The map is kept as the points where the
    difference changes (two machine integers each), at most ``_MAX_MOVES`` of them: past
    that, later lines keep the last difference."""

    def __init__(self) -> None:
        self.decided = False
        self.json_doc = False
        self.width = 0
        self.proven = False  # the width is proven by the block (else each join is checked)
        self.cat_n = False
        self.indent: int | None = None
        self.consumed = 0  # lines of the paste read so far
        self._out = 0  # lines returned so far
        self._reads = array("q")  # a line as read where the difference to the paste changes
        self._deltas = array("q")  # the difference (paste line - line as read) from there on
        self._held: list[str] = []  # a line that may go on in the next block

    @property
    def moved(self) -> bool:
        return bool(self._reads)

    def pasted_line(self, n: int) -> int:
        """The paste's line number of line ``n`` as read (``n`` itself when none moved)."""
        i = bisect_right(self._reads, n) - 1
        return n + self._deltas[i] if i >= 0 else n

    def _decide(self, lines: list[str]) -> None:
        body = [ln for ln in lines if ln.strip()]
        if not body:
            return
        self.decided = True
        self.json_doc = body[0].strip() in ("{", "[") and any(_JSON_DOC_TEXT.match(ln) for ln in body)
        if not self.json_doc:
            self.width, self.proven = _wrap_width(lines)
            self.cat_n = _numbered(lines, _CAT_N, consecutive=True)

    def block(self, raw: list[str], last: bool = False) -> tuple[list[str], list[str]]:
        """The block's lines as read and their roles (see the class). A line that may go on
        in the next block (a hard wrap cut at the block's end) is held back for it; ``last``
        (``flush``): no block follows."""
        if self._held:
            raw, self._held = self._held + raw, []
        lines: list[str] = []
        labels: list[str] = []
        origin: list[int] = []  # the paste's line number of each line
        base = self.consumed + 1
        for j, ln in enumerate(raw):
            if "\x1b" in ln:
                ln = _ANSI.sub("", ln)
            if _FENCE.match(ln):
                continue
            if ln[:1] == "{" or ln[:1] in " \t" and ln.lstrip()[:1] == "{":
                shipped = _json_line(ln)
                if shipped is not None:
                    lines.extend(shipped[0])
                    labels.extend([shipped[1]] * len(shipped[0]))
                    origin.extend([base + j] * len(shipped[0]))
                    continue
            lines.append(ln)
            labels.append("")
            origin.append(base + j)
        if not self.decided:
            self._decide(lines)
        elif not self.width and not self.json_doc:  # a wrap may show only after the first block
            self.width, self.proven = _wrap_width(lines)
        if self.json_doc:
            lines, labels, origin = self._json_doc(lines, labels, origin)
        if self.width and not self.json_doc:
            if not last and lines and len(lines[-1]) == self.width and origin[-1] == base + len(raw) - 1:
                self._held = raw[-1:]
                raw = raw[:-1]
                del lines[-1], labels[-1], origin[-1]
            lines, labels, origin = self._unwrap(lines, labels, origin)
        if self.cat_n:
            lines = [_CAT_N.sub("", ln, count=1) for ln in lines]
        lines = self._dedent(lines)
        if _numbered(lines, _TASK, consecutive=False):
            for i, ln in enumerate(lines):
                m = _TASK.match(ln)
                if m:
                    lines[i] = ln[m.end() :]
                    labels[i] = labels[i] or m.group(1)
        out: list[str] = []
        roles: list[str] = []
        for i, ln in enumerate(lines):
            got, role, name = strip_collector_label(ln)
            out.append(got)
            roles.append(role or _role_of(labels[i]))
            labels[i] = labels[i] or name
        order = _by_process(labels)
        if order is not None:
            out, roles, origin = [out[i] for i in order], [roles[i] for i in order], [origin[i] for i in order]
        self._map(origin, len(raw))
        return mend_tracebacks(out), roles

    def flush(self) -> tuple[list[str], list[str]]:
        """The line held back at the last block's end, read (no block follows)."""
        return self.block([], last=True) if self._held else ([], [])

    def _map(self, origin: list[int], consumed: int) -> None:
        """Record where the block's lines came from (``pasted_line``)."""
        first, base = self._out + 1, self.consumed + 1
        last = self._deltas[-1] if self._deltas else 0
        if len(origin) == consumed and origin == list(range(base, base + consumed)):
            # nothing removed or moved in the block: one difference for all of it
            if origin and base - first != last and len(self._reads) < _MAX_MOVES:
                self._reads.append(first)
                self._deltas.append(base - first)
        else:
            for n, o in enumerate(origin, start=first):
                if o - n != last and len(self._reads) < _MAX_MOVES:
                    last = o - n
                    self._reads.append(n)
                    self._deltas.append(last)
        self._out += len(origin)
        self.consumed += consumed

    def _json_doc(
        self, lines: list[str], labels: list[str], origin: list[int]
    ) -> tuple[list[str], list[str], list[int]]:
        out: list[str] = []
        lab: list[str] = []
        org: list[int] = []
        for ln, label, o in zip(lines, labels, origin, strict=True):
            m = _JSON_DOC_TEXT.match(ln)
            if m is not None:
                try:
                    text = json.loads(m.group(1))
                except ValueError:
                    text = m.group(1)
                parts = text.rstrip("\n").split("\n")
                out.extend(parts)
                lab.extend([label] * len(parts))
                org.extend([o] * len(parts))
            elif not _JSON_DOC_OTHER.match(ln):
                out.append(ln)
                lab.append(label)
                org.append(o)
        return out, lab, org

    def _unwrap(self, lines: list[str], labels: list[str], origin: list[int]) -> tuple[list[str], list[str], list[int]]:
        out: list[str] = []
        lab: list[str] = []
        org: list[int] = []
        cont = False
        for ln, label, o in zip(lines, labels, origin, strict=True):
            if (
                cont
                and len(out[-1]) < MAX_LOG_LINE
                and (_cut_inside(out[-1], ln, word=True) or self.proven and ln and not _starts_line(out[-1], ln))
            ):
                out[-1] += ln
            else:
                out.append(ln)
                lab.append(label)
                org.append(o)
            cont = len(ln) == self.width
        return out, lab, org

    def _dedent(self, lines: list[str]) -> list[str]:
        if self.indent is None:  # the first block with text decides
            body = [ln for ln in lines if ln.strip()]
            if not body:
                return lines
            self.indent = min(len(ln) - len(ln.lstrip(" \t")) for ln in body)
        k = self.indent
        if not k:
            return lines
        return [ln[min(k, len(ln) - len(ln.lstrip(" \t"))) :] for ln in lines]


def _role_of(label: str) -> str:
    if not label:
        return ""
    r = _ROLE.search(label)
    return r.group(0).lower() if r else ""


def _by_process(labels: list[str]) -> list[int] | None:
    """The order that reads several labelled processes interleaved line by line process by
    process (each in the order it first appears; an unlabelled line stays with the line
    before it), or None when at most one process is labelled or its lines come in runs."""
    names: dict[str, list[int]] = {}
    cur = ""
    switches = 0
    for i, label in enumerate(labels):
        if label and label != cur:
            switches += 1
            cur = label
        names.setdefault(cur, []).append(i)
    named = [k for k in names if k]
    if len(named) < 2 or switches <= 2 * len(named):
        return None
    return [i for k in names for i in names[k]]


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
