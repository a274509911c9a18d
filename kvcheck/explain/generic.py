"""General rules: explain a failure line no specific signature knows by its kind.

``GenericReader`` reads the log line by line (bounded state: the open traceback, a lone
exception message being joined, a native stack, a C++ assertion, the node's command
outputs) and hands each to its rule: Python exceptions in ``pyerrors`` (imports that fail in
``pyenv``), error log lines in ``errorlogs``, native lines in ``native``, native crash stacks
and C++ assertions in ``crashes``, the node's command outputs in ``nodestate``; what they
share is in ``rulebase``.

Specific signatures (``signatures.yaml``) name one known failure. A log from a fault not
seen before has none, and "not recognized" tells the on-call engineer nothing. These
rules read what every such line still carries, from documented meanings only
(``generic.yaml``), never one log's text:

- a Python traceback: the exception type (code mismatch, lookup of a state that is gone,
  a broken invariant, a refusal with its message, network, GPU), the innermost frame of
  the engine's own code (SGLang: the module under ``sglang/srt/`` and its function,
  mapped to the subsystem), and from the functions on the stack the phase (an
  ``__init__``/registration at start-up, a bootstrap at the first request);
- a native error line: the library and component from its source file (Mooncake's
  ``rdma_context.cpp`` is device/memory-region setup, ``rdma_endpoint.cpp`` the QP
  handshake, UCX's ``wireup.c`` the endpoint wire-up ...), NIXL's API step from the
  function it names (``registerMem``, ``loadRemoteMD``, ``postXferReq``), and the
  meaning of the status it prints (``NIXL_ERR_*``, UCX status strings);
- errno of a memory registration (ENOMEM = locked-memory limit, EFAULT/EINVAL = GPU
  memory not registrable for RDMA, EPERM = privilege), a plugin whose shared library is
  missing (which library says which install is wrong), RDMA devices the process cannot
  see, a peer address that is an unbracketed IPv6 literal.

Each yields a ``GenericFinding``: what failed (component, phase, meaning), the question
to ask or the command to run, and — for the errno/library/device/address rules, whose
meaning decides the cause class — a cause. The located-only findings (``*-generic``)
rank below every specific cause, so a specific signature always wins.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from kvcheck.explain.crashes import _NATIVE_ASSERT, NativeAssert, NativeStack, killed_line
from kvcheck.explain.errorlogs import (
    class_line_finding,
    engine_log_finding,
    errno_line_finding,
    known_message_finding,
    message_class,
    nixl_status_finding,
    sglang_log_finding,
)
from kvcheck.explain.formats import _SRC_FILE, FormatMatch, line_level, match_line, phase_of_function, whose
from kvcheck.explain.lines import ENGINE_NAMES
from kvcheck.explain.mooncake_native import explain as mooncake_explain
from kvcheck.explain.mooncake_native import place as mooncake_place
from kvcheck.explain.mooncake_native import rpc_line
from kvcheck.explain.mooncake_native import table as mooncake_table
from kvcheck.explain.native import _GLOG, native_line, ucx_transport_line
from kvcheck.explain.nodestate import NodeState
from kvcheck.explain.pyenv import _IMPORT_STMT
from kvcheck.explain.pyerrors import _EXC, attribute_mismatch, traceback_finding
from kvcheck.explain.router import router_message, router_message_finding
from kvcheck.explain.rulebase import GenericFinding, engine_of_module, nixl_step, rules, sglang_subsystem

__all__ = ["GenericFinding", "GenericReader", "engine_of_module", "nixl_step", "rules", "sglang_subsystem"]

_PREFIXES = re.compile(
    r"^(?:\s*\((?:[A-Za-z][\w.]*(?:[ _][\w=.]+)*? )?pid=\d+(?:, "
    r"ip=[\d.]+)?\)\s*)+|^\s*(?:ERROR|INFO|WARNING|DEBUG|CRITICAL) \d\d-\d\d "
    r"\d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?"
    r"|^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z_]+\d+)*\] ?"
)
_TB = re.compile(r"Traceback \(most recent call last\):")
# a thread's stack in Python's fault handler dump ("Current thread 0x... (most recent call first):",
# faulthandler): its frames come innermost first
_TB_RECENT_FIRST = re.compile(r"(?:^|\s)(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)"(?:, line (?P<line>\d+))?,? in (?P<func>[\w<>.]+)')
# a line any rule below can read holds one of these (the per-line prefilter)
_HINTS = (
    "call first",
    "ircuit breaker",
    "rror",
    "ail",
    "xception",
    "Traceback",
    "annot",
    "nable",
    "could not",
    "exceeded",
    ".cpp:",
    ".cc:",
    ".c:",
    ".h:",
    "UCX",
    "NIXL_ERR",
    "evice",
    "RNIC",
    "HCAs",
    "egister",
    "reg_mr",
    "cqe",
    "Exit",
    "Interrupt",
    'File "',
    "No module named",
    "max locked memory",
    "undefined symbol",
    "import ",
    "full",
    "ERROR",
    "WARN",
    "nvalid",
    "required",
    "not provided",
    "FATAL",
    "Fatal",
    "xpired",
)


# a NIXL API call in a line (a traceback's source line, or code pasted with the error)
_NIXL_CALL = re.compile(
    r"\b(?:add_remote_agent|register_memory|registerMem|get_reg_descs|prep_xfer_dlist|prepXferDlist"
    r"|make_prepped_xfer|makeXferReq|initialize_xfer|transfer|postXferReq|check_xfer_state|getXferStatus"
    r"|loadRemoteMD|fetch_remote_metadata|send_notif|genNotif|get_new_notifs|getNotifs|create_backend"
    r"|createBackend|nixl_agent)\("
)
_CALL_HINTS = (
    "remote_agent",
    "egisterMem",
    "register_memory",
    "xfer",
    "Xfer",
    "RemoteMD",
    "otif",
    "ackend",
    "nixl_agent",
)


# the hints as one search each (a C loop over the line, not a Python loop over the words);
# with the opening words of every message ``known_messages`` names (read when the first
# reader is made)
@functools.lru_cache(maxsize=1)
def _hint_rx() -> re.Pattern[str]:
    heads = {fmt.split("{}")[0].strip()[:24] for _e, fmt in rules()["_known_messages"]}
    return re.compile("|".join(re.escape(k) for k in [*_HINTS, *sorted(h for h in heads if len(h) >= 8)]))


_CALL_HINT_RX = re.compile("|".join(re.escape(k) for k in _CALL_HINTS))
_CALL_REACH = 12
_ERROR_LOGS = (
    "log:error",
    "log:exception",
    "log:critical",
    "log:fatal",
)  # lines between a NIXL call shown and the status it returned
# a line that starts a log record of its own (a level, a date, a glog header)
# a line that starts a log record of its own (a level, a time, glog's letter, Python's
# ``Exception in thread NAME:`` header before a thread's traceback)
_LOG_START = re.compile(
    r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b|\d{4}-\d\d-\d\d|\d\d:\d\d:|[IWEF]\d{4} |Exception in thread "
)


# a raise statement with a literal message (``raise ValueError("...")``)
_RAISE_SRC = re.compile(r"raise (?P<type>[A-Z]\w*(?:Error|Exception))\(\s*f?(?P<q>[\"'])(?P<msg>.+?)(?P=q)\s*\)?\s*$")

# processes whose own messages kvcheck has no formats for (their lines are said as theirs)
_UNMODELED = {"dynamo", "trtllm", "sglang-router", "dynamo-vllm"}

# the Python source file a process's log prefix names (vLLM's ``[nixl_connector.py:548]``)
_PY_FILE = re.compile(r"\[(\w+\.py):\d+\]")
_MAX_WARNINGS = 20  # other projects' warnings kept as findings, at most

# a line saying GPU memory registration through dma-buf is on (libfabric's hmem, UCX, NCCL)
_DMABUF_ON = re.compile(r"use_dmabuf\s*[=:]\s*(?:1|true|yes)|dmabuf support status: 1|[Gg]et dma ?buf handle with fd")


def _mooncake_own(got: GenericFinding) -> bool:
    """Whether ``got`` is ``mooncake_native``'s reading of a glog line without its format (a
    family or the component's step), which the line's format, when found, replaces."""
    return got.engine == "mooncake" and (got.id in mooncake_table()["_families"] or got.id == "native-error-generic")


def _strip(line: str) -> str:
    m = _PREFIXES.match(line)
    while m is not None and m.end() > 0:
        line = line[m.end() :]
        m = _PREFIXES.match(line)
    return line


def _with_os_error(known: GenericFinding, got: GenericFinding | None) -> GenericFinding:
    """A known message's finding with the OS error the same line carries (``got``, an
    ``os-*`` finding: its errno and what it means) said in its cause."""
    if got is not None and got.id.startswith("os-") and " — " in got.cause:
        known.cause += f" The OS error in the line: {got.cause.split(' — ', 1)[1].rstrip('.')} ({got.id[3:].upper()})."
    return known


_FRAMES_AFTER = 3  # lines from an exception read alone to frames pasted below it ('...' between)


class GenericReader:
    """Line-by-line, bounded state: the open traceback (its frames, at most 64 kept)."""

    def __init__(self) -> None:
        self.found: list[GenericFinding] = []
        self._tb_line = 0
        self._frames: list[tuple[str, str, str]] = []
        self._src = ""  # the source line shown under the last frame
        self._expect_src = False
        self._lone: tuple[int, str, int, int] | None = None  # (line, text, indent, lines joined)
        # the last exception line read alone: (its line, the line it ended on, its match, its finding)
        self._after_lone: tuple[int, int, re.Match[str], GenericFinding | None] | None = None
        self._recent_first = False  # the open stack is a fault dump's thread (innermost frame first)
        self._seen: set[str] = set()
        self.node = NodeState()
        self.stack = NativeStack()
        self._last_import = ""  # the module the last import statement seen named
        self._last_call: tuple[int, str] = (0, "")  # the last NIXL API call a line showed (line, text)
        self.asserts = NativeAssert()
        self._foreign_at = -(10**9)  # the last line another engine wrote
        self.format_hits: list[tuple[int, FormatMatch]] = []  # SGLang formats matched on log lines (50 at most)
        self._fmt_budget = 2000  # lines tried against the formats at most
        self._hints = _hint_rx()  # the per-line prefilter
        # a native error line no format matched (line, its message): the paste may have wrapped
        # it, its message going on over the next, indented line
        self._open_native: tuple[int, str] | None = None
        self._dmabuf = 0  # the line that showed dma-buf registration of GPU memory enabled
        self._warnings = 0  # other projects' warnings read so far
        self.engine_hits: list[tuple[int, FormatMatch]] = []  # other projects' formats matched (200 at most)
        # the process engine the log shows most so far (the attribution's ``context_engine``)
        self.context: Callable[[], str] = lambda: ""
        # the paste's line number of a line as read (``prefixes.Paste.pasted_line``)
        self.pasted: Callable[[int], int] = int

    # ------------------------------------------------------------------ per line
    def feed(self, lineno: int, line: str, sglang_formats: bool = True, engine: str = "") -> None:
        """Read one line; ``sglang_formats``: whether it may be one of SGLang's own
        messages (False for a line another engine's process wrote); ``engine``: whose
        text the attribution says it is ('' unplaced)."""
        if not sglang_formats:
            self._foreign_at = lineno
        if self._open_native is not None:
            self._wrapped_native(lineno, line)
        if self.stack.head_line or "ig" in line or "ault" in line or "bort" in line or "gdb" in line or "atal" in line:
            got = self.stack.feed(lineno, line)
            if got is not None:
                self._add(got)
        if self.node.armed or "evice" in line or "locked" in line or "ulimit" in line:
            got = self.node.feed(lineno, line)
            if got is not None:
                self._add(got)
        if ("Kill" in line or "OOM" in line) and len(self.found) < 200:
            got = killed_line(lineno, line)
            if got is not None:
                self._add(got)
        if "dma" in line and not self._dmabuf and _DMABUF_ON.search(line):
            self._dmabuf = lineno
        if self._lone is not None:
            if self._continue_lone(line):
                return
        if "(" in line and _CALL_HINT_RX.search(line) and _NIXL_CALL.search(line):
            self._last_call = (lineno, line.strip()[:200])
        if not self._tb_line and (not self._hints.search(line) or "batch, #" in line):
            return  # one search per line outside a traceback; batch statistics never fail
        s = _strip(line).rstrip()
        if not s:
            return
        if _TB.search(s):
            self._close(lineno, None)
            self._tb_line, self._frames, self._src = lineno, [], ""
            return
        if "most recent call first" in s and _TB_RECENT_FIRST.search(s):
            self._close(lineno, None)
            self._tb_line, self._frames, self._src = lineno, [], ""
            self._recent_first = True
            return
        if not self._tb_line and _FRAME.match(s):
            # a traceback pasted from its middle (no "Traceback" header): its frames still
            # say where it ran
            self._tb_line, self._frames, self._src = lineno, [], ""
        if "import" in s:
            im = _IMPORT_STMT.match(s)
            if im:
                self._last_import = im.group("a") or im.group("b") or ""
        if self._tb_line:
            fr = _FRAME.match(s)
            if fr:
                if len(self._frames) < 64:
                    self._frames.append((fr.group("path"), fr.group("line") or "", fr.group("func")))
                self._expect_src = True
                return
            ex = _EXC.match(s.strip())
            if ex:
                self._close(lineno, ex)
                return
            st = s.strip()
            if st.startswith(("^", "~")):
                return
            if self._expect_src and not _GLOG.match(st):
                # the source line under a frame (its indentation lost in a paste)
                self._src, self._expect_src = st[:300], False
                return
            if not s.startswith((" ", "\t")):
                self._close(lineno, None)
        else:
            ex = _EXC.match(s.strip())
            if (
                ex
                and ex.group("msg")
                and (ex.group("type") in rules()["_exc_kind"] or "nixl" in ex.group(0).split(":")[0])
            ):
                # an exception line pasted without its traceback; its message may go on
                # over the next lines (wrapped), read before it is closed
                indent = len(s) - len(s.lstrip())
                self._lone = (lineno, s.strip(), indent, 0)
                return
        if len(self.found) < 200:
            if self.asserts.pending is not None or ("Assertion failed" in s and _NATIVE_ASSERT.search(s)):
                for g in self.asserts.feed(lineno, s):
                    self._add(g)
                return
            got = (
                ucx_transport_line(lineno, s, self._seen)
                or (rpc_line(lineno, s) if "pp:" in s else None)
                or native_line(lineno, s, self._seen)
            )
            if got is None and "NIXL_ERR_" in s and lineno - self._last_call[0] <= _CALL_REACH:
                got = nixl_status_finding(s, lineno, self._last_call[1])
            if got is None and not self._tb_line:
                got = errno_line_finding(lineno, s, engine if engine not in ("", "native") else "")
            if got is None and not self._tb_line and "object has no attribute" in s:
                got = attribute_mismatch(
                    s, engine if engine not in ("", "native") else "", "this line", "", (lineno, 0, s)
                )
            if engine == "sglang-router" and not self._tb_line:
                # the router's own line: its messages kvcheck knows, never SGLang's or another
                # project's formats (a router error reads much like theirs)
                known = router_message_finding(lineno, line)
                if known is not None:
                    got = _with_os_error(known, got)
            elif (
                (
                    got is None
                    or got.id.startswith("os-")
                    or got.id == "native-error-generic"
                    or got.engine == "mooncake"
                )
                and not self._tb_line
                and self._fmt_budget
            ):
                self._fmt_budget -= 1  # bounded work: the first lines that may fail are read, not all
                level = line_level(line)
                pyf = _PY_FILE.search(line) if ".py:" in line else None
                fm = self._format_of(s, sglang_formats, engine, level, pyf.group(1) if pyf else "")
                if fm is None and got is not None and got.id in ("native-error-generic", "mooncake-error-log-generic"):
                    gl = _GLOG.match(s)
                    self._open_native = (lineno, gl.group("text")) if gl else None
                if fm is not None and fm.engine != "sglang":
                    if len(self.engine_hits) < 200:
                        self.engine_hits.append((lineno, fm))
                    got = self._engine_format(fm, got, lineno, s, level)
                elif fm is not None:
                    if len(self.format_hits) < 50:
                        self.format_hits.append((lineno, fm))
                    known = known_message_finding(fm, lineno, s)
                    if known is not None:
                        got = _with_os_error(known, got)
                    elif got is not None and got.id.startswith("os-"):  # the OS error inside a message SGLang logs
                        got.engine = "sglang"
                        got.cause += f" SGLang logs it in {fm.where()}."
                        got.phase = got.phase or phase_of_function(fm.function, fm.module)
                    elif got is None and fm.kind in _ERROR_LOGS:
                        got = sglang_log_finding(fm, lineno, s)
            if got is None and not self._tb_line and self._fmt_budget:
                got = class_line_finding(lineno, s, engine if engine not in ("python", "native") else "")
            if got is None and not self._tb_line and engine in _UNMODELED and self._fmt_budget:
                got = self._unmodeled_line(lineno, s, engine, line_level(line))
            if got is not None:
                self._add(got)

    def _wrapped_native(self, lineno: int, line: str) -> None:
        """The line after a native error line no format matched: when it is indented, the
        paste wrapped that message over it; the two read together as one message of a
        known meaning (``known_messages``) are its cause."""
        at, head = self._open_native or (0, "")
        self._open_native = None
        if lineno != at + 1 or line[:1] not in (" ", "\t") or not line.strip():
            return
        text = head.rstrip() + " " + line.strip()
        fm = self._format_of(text, False, "")
        got = known_message_finding(fm, at, text) if fm is not None else None
        if got is not None:
            got.lines = [at, lineno]
            self._add(got)

    def _unmodeled_line(self, lineno: int, s: str, engine: str, level: str) -> GenericFinding | None:
        """An error (or, few, a warning) of a process kvcheck has no message formats for
        (Dynamo's Rust runtime, TensorRT-LLM, the router): said as that process's own words,
        and that kvcheck explains nothing more of it."""
        if level not in ("error", "fatal", "critical", "warning"):
            return None
        warning = level == "warning"
        if warning:
            if self._warnings >= _MAX_WARNINGS:
                return None
            self._warnings += 1
        name = ENGINE_NAMES.get(engine, engine)
        text = router_message(s) if engine == "sglang-router" else s.strip()
        return GenericFinding(
            id=f"{engine}-{'warning' if warning else 'error'}-log-generic",
            title=f"{name} {'warned' if warning else 'logged an error'}: {text[:160]}",
            engine=engine,
            line=lineno,
            component=name,
            text=text[:300],
            role="warning" if warning else "cause",
            cause=f"{name}'s own {'warning' if warning else 'error'} line: {text[:240]}. "
            + (
                # kvcheck reads Dynamo's Python workers' formats: say so, not "no formats for Dynamo"
                "kvcheck has no message formats for Dynamo's Rust runtime, and none of its Python workers' formats "
                "matches this line"
                if engine == "dynamo"
                else f"kvcheck knows only a few of {name}'s PD messages (worker selection, PD dispatch, health "
                "checks, circuit breaker), and this is none of them"
                if engine == "sglang-router"
                else f"kvcheck has no message formats for {name}"
            )
            + " (it reads SGLang's, vLLM's, vLLM-Ascend's, LMCache's, Dynamo's Python workers', "
            "NIXL's, UCX's and Mooncake's): the line's words are all it says"
            + (" (a warning: the cause only where the log shows no error)." if warning else "."),
            checks=[f"{name}'s documentation/issues for this text, and its release"],
            fix=f"Act on what the line names in {name}'s terms.",
        )

    def _format_of(
        self, s: str, sglang_formats: bool, engine: str, level: str = "", file: str = ""
    ) -> FormatMatch | None:
        """The format of line ``s``: SGLang's or another project's (``formats.match_line``);
        a line another engine's process wrote is never read as one of SGLang's."""
        sg, other = match_line(s, level, file, engine if engine not in ("sglang", "python", "native") else "")
        if not sglang_formats:
            return other if other is not None and other.engine != "sglang" else None
        if engine and engine not in ("sglang", "python", "native") and other is not None:
            return other  # the line is placed as that project's (its prefix or its file)
        return whose(s, self.context(), level)

    def _engine_format(
        self, fm: FormatMatch, got: GenericFinding | None, lineno: int, s: str, level: str = ""
    ) -> GenericFinding | None:
        """What a line another project formats adds: where it prints it and in which of
        its releases (to a native line's or an OS error's finding), or, for an error
        level line no rule read, the project's own message located; a message whose
        meaning the project states (``known_messages``) is that cause, at any level."""
        known = known_message_finding(fm, lineno, s)
        if known is not None:
            return _with_os_error(known, got)
        if fm.engine == "mooncake" and (got is None or got.id.startswith("os-") or _mooncake_own(got)):
            mc = self._mooncake(fm, got, lineno, s, level)
            if mc is not None or got is None:
                return mc
        if got is not None and not message_class(fm.text):
            got.cause += f" {fm.engine_name} prints it in {fm.where()} (its releases {fm.span(fm.all_releases)})."
            placed = mooncake_place(fm.module, fm.function) if fm.engine == "mooncake" else None
            if placed is not None:  # a general rule's cause on a Mooncake line: the component and its step
                got.cause += f" The component: {placed[0]['name']} ({placed[0]['does']})."
            if got.id.startswith("os-"):
                got.engine = fm.engine
            return got
        # the line's own level where it shows one (the same text is logged at other levels elsewhere)
        error = fm.is_error and fm.level not in ("diag", "print") and level not in ("info", "warning")
        if error or level in ("error", "fatal", "critical") or got is not None:
            return engine_log_finding(fm, lineno, s)
        if (level == "warning" or fm.level == "warning") and self._warnings < _MAX_WARNINGS and level != "info":
            # a warning of that project: what the log has when it shows no error (kept few)
            self._warnings += 1
            return engine_log_finding(fm, lineno, s, warning=True)
        return None

    def _mooncake(
        self, fm: FormatMatch, got: GenericFinding | None, lineno: int, s: str, level: str
    ) -> GenericFinding | None:
        """A line of Mooncake's, matched whole by its format: its component, phase and failure
        family (``mooncake_native.explain``), with the OS error the line carries (``got``, an
        ``os-*`` finding); a warning stays a warning (few kept), an info line nothing."""
        error = fm.is_error and fm.level not in ("diag", "print") and level not in ("info", "warning")
        warning = not error and level != "info" and (level == "warning" or fm.level == "warning")
        if not (error or level in ("error", "fatal", "critical") or got is not None):
            if not warning or self._warnings >= _MAX_WARNINGS or message_class(fm.text):
                return None
            self._warnings += 1
        else:
            warning = False
        os_cause = got.cause.split(" — ", 1)[1].rstrip(".") if got is not None and " — " in got.cause else ""
        own = _SRC_FILE.search(s) if ":" in s else None
        mc = mooncake_explain(lineno, s, fm.text, fm, own.group(1) if own else "", os_cause)
        if mc is not None and warning:
            mc.role = "warning"
            mc.cause += " A warning: the cause only where the log shows no error."
            if mc.id.endswith("-generic"):
                mc.id = "mooncake-warning-log-generic"
        return mc

    def finish(self) -> list[GenericFinding]:
        got = self.stack.close()
        if got is not None:
            self._add(got)
        if self._lone is not None:
            self._flush_lone()
        for g in self.asserts.finish():
            self._add(g)
        if self._dmabuf:  # the log shows GPU memory registration through dma-buf was on
            for g in self.found:
                if (
                    g.id == "rdma-register-gpu-memory"
                    and g.line > self._dmabuf
                    and "The log shows dma-buf" not in g.cause
                ):
                    g.cause += (
                        " The log shows dma-buf registration of GPU memory enabled/supported "
                        f"(line {self.pasted(self._dmabuf)}), "
                        "yet this registration failed as a plain registration of the GPU address does: the "
                        "provider/driver did not take its dma-buf path for this region (a libfabric/EFA or kernel "
                        "release whose dma-buf path this platform does not get)."
                    )
        if self.node.memlock:  # the ulimit output pasted with the log says which limit
            for g in self.found:
                if g.id == "rdma-register-enomem" and "max locked memory" not in g.cause:
                    g.cause += f" The log shows max locked memory {self.node.memlock} KB."
        self._close(0, None)
        return self.found

    def _continue_lone(self, line: str) -> bool:
        """Whether ``line`` continues the pending lone exception message (same indentation,
        plain text, no log line of its own: a message of several sentences, or one wrapped
        over lines); closes it otherwise."""
        assert self._lone is not None
        lineno, text, indent, n = self._lone
        if _strip(line) != line:
            self._flush_lone()  # a line with its own log prefix is another message
            return False
        s = line.rstrip()
        st = s.strip()
        if (
            st
            and n < 4
            and len(s) - len(s.lstrip()) == indent
            and not _EXC.match(st)
            and not _FRAME.match(s)
            and not _TB.search(s)
            and not _GLOG.match(s)
            and not _LOG_START.match(st)
            and not st.startswith(("[", "(", "#", "$", "{", "<"))
            and (not text.endswith((".", "!")) or st[:1].isupper())
        ):
            self._lone = (lineno, text + " " + st, indent, n + 1)
            return True
        self._flush_lone()
        return False

    def _flush_lone(self) -> None:
        assert self._lone is not None
        lineno, text, _, n = self._lone
        self._lone = None
        ex = _EXC.match(text)
        if ex is None:
            return
        if _NATIVE_ASSERT.search(text):
            for g in self.asserts.feed(lineno, text):
                self._add(g)
            return
        self._tb_line, self._frames = lineno, []
        self._close(lineno + n, ex, lone=True)

    # ------------------------------------------------------------------ tracebacks

    def _close(self, lineno: int, ex: re.Match[str] | None, lone: bool = False) -> None:
        src, self._src, self._expect_src = self._src, "", False
        if ex is None and self._frames and src.startswith("assert "):
            # a traceback cut after its failing assert: the assert statement is the message
            ex = _EXC.match("AssertionError: " + src)
        elif ex is None and self._frames and src.startswith("raise "):
            # a traceback cut after its raise statement: the raise names the exception and its message
            rm = _RAISE_SRC.match(src)
            if rm is not None:
                ex = _EXC.match(f"{rm.group('type')}: {rm.group('msg')}")
        elif ex is not None and ex.group("type") == "AssertionError" and not ex.group("msg") and src:
            ex = _EXC.match("AssertionError: " + src)  # a bare AssertionError: the statement says what
        if not self._tb_line or (not self._frames and ex is None) or (not self._frames and not lone):
            self._tb_line, self._frames = 0, []
            return
        frames, tb_line = self._frames, self._tb_line
        self._tb_line, self._frames = 0, []
        if self._recent_first:  # a fault dump's thread: innermost first, read outermost first
            frames, self._recent_first = frames[::-1], False
        after, self._after_lone = self._after_lone, None
        if ex is None and frames and after is not None and 0 < tb_line - after[1] <= _FRAMES_AFTER:
            # the exception line pasted above its own frames (the error first, then '...' and the
            # frames that matter): one traceback, read with its frames
            tb_line, ex = after[0], after[2]
            if after[3] is not None and after[3] in self.found:
                self.found.remove(after[3])
        call = self._last_call[1] if lineno - self._last_call[0] <= _CALL_REACH else ""
        sglang_ok = self._foreign_at < tb_line  # no line of the traceback was another engine's
        got = traceback_finding(
            frames, tb_line, lineno, ex, src, self._last_import, call, sglang_ok=sglang_ok, context=self.context()
        )
        if got is not None:
            self._add(got)
        if lone and ex is not None:
            self._after_lone = (tb_line, lineno, ex, got if got is not None and got in self.found else None)

    def _add(self, f: GenericFinding) -> None:
        if len(self.found) < 200:
            self.found.append(f)
