"""General rules for native crashes: what a C/C++ library died of, and where.

- C++ assertions (``Assertion failed: <expr> (<file>:<line>)``), start-up when a
  constructor is on the stack that follows;
- native crash stacks (gdb, UCX/glibc backtraces, C++ throw traces): the first frame
  outside libc, the unwinder and the signal handler names the library that died, and the
  frames say what the process was doing (``generic.yaml`` ``crash_steps``) and its phase.

Each yields a ``rulebase.GenericFinding``.
"""

from __future__ import annotations

import re

from kvcheck.explain.native import _engine_of_native
from kvcheck.explain.rulebase import GenericFinding, demangle_names, engine_of_module, rules

_NATIVE_ASSERT = re.compile(
    r"Assertion failed: (?P<expr>.+?) \((?P<file>[\w./\\-]+\.(?:cpp|cc|cu|h|hpp)):(?P<ln>\d+)\)"
)
# a C++ constructor frame (``CacheTransceiver::CacheTransceiver(``): the object is being built
_CTOR = re.compile(r"\b(\w+)::\1\(")


# ---------------------------------------------------------------- native stacks
# a crash header: the stack that follows it says where the process died
_CRASH_HEAD = re.compile(
    r"Caught signal (?P<sig>\d+) \((?P<what>[^):]*)|Segmentation fault|Segfault encountered|SIGSEGV|SIGABRT|SIGBUS"
    r"|Aborted \(core dumped\)"
    r"|terminate called after throwing|\(gdb\) (?:bt|backtrace|thread apply all bt)|^Thread \d+ \(Thread 0x"
    r"|Fatal Python error: (?P<fatal>\w[\w ]*)"
)
# frames: gdb (``#3 0x.. in ns::Class::fn (args) at file.cpp:474`` / ``from lib.so``), glibc/UCX
# backtraces (`` 3  /path/libuct_ib.so.0(uct_rc_mlx5_ep_put_zcopy+0x1a0) [0x..]``), C++ throw
# traces (``2  0x7f.. tensorrt_llm::Foo::bar(int) + 76``)
_NFRAME = re.compile(
    r"^\s*#\d+\s+(?:0x[0-9a-f]+ in )?(?P<gfunc>[\w:~.<>]+?)(?:<[^(]*>)?\s*\((?:.*\)\s*(?:at (?P<gfile>\S+?):\d+|from "
    r"(?P<glib>\S+)))?"
    r"|^\s*\d+\s+(?P<blib>[$/~.\w][^\s(]*?\.so[\w.]*)\((?P<bfunc>[\w:.~]*)(?:\+0x[0-9a-f]+)?\)"
    r"|^\s*\d+\s+0x[0-9a-f]+ (?P<cfunc>[\w:~]+)\("
    # a native frame in a Python fault dump with native symbols (``File "<unknown>", line 0, in ns::f()``)
    r"|^\s*File \"<unknown>\", line \d+, in (?P<ffunc>[\w:~]+)"
)
_NOISE = re.compile(
    r"^(?:__|_Unwind|_ZN?\d*__cxa|raise$|abort$|syscall$|killpg$|gsignal$|ucs_(?:handle_error|debug|error|log|fatal)"
    r"|ucs_\w*backtrace|std::|__gnu_cxx|asio::|boost::|fmt::|spdlog::|folly::|PyObject_|_Py|Py[A-Z]|cfunction_|method_vectorcall"
    r"|ucm_|pthread_|start_thread|clone|sigtramp|\?\?)"
)
_NOISE_LIB = re.compile(r"lib(?:c|pthread|gcc_s|stdc\+\+|unwind|python[\d.]*|dl|m|ucs|ucm)[.-]|/python\d|ld-linux")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class NativeStack:
    """The frames after a crash header (bounded: 48 lines, 32 frames): where the process
    died, named by the first frame outside libc/libstdc++/the unwinder/the signal handler."""

    def __init__(self) -> None:
        self.head_line = 0
        self.head = ""
        self.left = 0
        self.frames: list[tuple[str, str, str]] = []  # (function, file, library)

    def feed(self, lineno: int, s: str) -> GenericFinding | None:
        done = None
        if "_Z" in s:  # a frame printed without symbol resolution: its mangled C++ name
            s = demangle_names(s)
        h = (
            _CRASH_HEAD.search(s)
            if (
                "ig" in s or "ault" in s or "bort" in s or "gdb" in s or "hread" in s or "terminate" in s or "atal" in s
            )
            else None
        )
        if h is not None and not (self.head_line and not self.frames):
            done = self.close()
            self.head_line, self.head, self.left, self.frames = lineno, s.strip()[:300], 48, []
            return done
        if not self.head_line:
            return None
        m = _NFRAME.match(s)
        if m is not None:
            if len(self.frames) < 32:
                func = m.group("gfunc") or m.group("bfunc") or m.group("cfunc") or m.group("ffunc") or ""
                self.frames.append((func, m.group("gfile") or "", m.group("glib") or m.group("blib") or ""))
        self.left -= 1
        if self.left <= 0:
            return self.close()
        return None

    def close(self) -> GenericFinding | None:
        head, line, frames = self.head, self.head_line, self.frames
        self.head_line, self.frames, self.left = 0, [], 0
        if not line or not frames:
            return None
        for func, file, lib in frames:
            short = func.split("::")[-1]
            if _NOISE.match(func) or _NOISE.match(short) or (not func and _NOISE_LIB.search(lib)):
                continue
            if lib and _NOISE_LIB.search(lib) and not func:
                continue
            text = f"{func} {lib} {file}"
            for rx, engine, comp in rules()["_places"]:
                mm = rx.search(text)
                if mm is None:
                    continue
                if engine == "mooncake":
                    name = file.replace("\\\\", "/").split("/")[-1] if file else ""
                    cls = mm.groupdict().get("cls") or ""
                    cand = name or (_snake(cls) + ".cpp" if cls else "")
                    comp = next(
                        (c["component"] for r2, c in rules()["_components"] if cand and r2.match(cand)),
                        f"Mooncake {cls or 'transfer engine'}",
                    )
                where = func or lib.split("/")[-1]
                step, phase, anytime = crash_step(frames)
                known = next((c for rx, c in rules()["_known_crashes"] if func and rx.search(func)), None)
                if known is not None:  # a crash the project fixed (``known_crashes``)
                    return GenericFinding(
                        id=known["id"],
                        title=known["title"].replace("{func}", func),
                        engine=engine,
                        line=line,
                        phase=phase,
                        phase_log=anytime,
                        component=comp,
                        text=head,
                        cause=known["cause"].replace("{func}", func)
                        + (f" The stack shows it was {step}." if step else ""),
                        checks=list(known["checks"]),
                        fix=known["fix"],
                    )
                return GenericFinding(
                    id="native-crash-generic",
                    title=f"native crash in {where} ({comp})" + (f" while {step}" if step else ""),
                    engine=engine,
                    line=line,
                    phase=phase,
                    phase_log=anytime,
                    component=comp,
                    text=head,
                    cause=f"The process died in native code: the first frame outside the C library, the unwinder and "
                    f"the signal handler is {where}"
                    + (f" ({file})" if file else "")
                    + f", in {comp}"
                    + (f"; the stack shows it was {step}" if step else "")
                    + ". The crash is that component's, not the Python code's above it.",
                    checks=[
                        f"the release of {engine} (pip show / the image) and its issues for a crash in {where}",
                        "what the process was doing then (the log lines just before: start-up, a transfer, a peer)",
                    ],
                    fix=f"Look up {where} in {engine}'s issues for the release in use; capture the full backtrace "
                    "(UCX_HANDLE_ERRORS=bt, gdb bt) when reporting.",
                )
            if not func:
                continue  # an unnamed frame of a library kvcheck does not place
            return None  # a named frame kvcheck cannot place: say nothing rather than guess
        return None


def crash_step(frames: list[tuple[str, str, str]]) -> tuple[str, str, bool]:
    """(what the process was doing, the phase, whether that activity runs in any phase) by the
    frames of a crash stack: the first row of ``generic.yaml`` ``crash_steps`` any frame matches
    (a rendezvous frame over an ``rkey_destroy`` inside it), or ('', '', False)."""
    funcs = [f for f, _file, _lib in frames if f and not _NOISE.match(f)]
    for rx, step, phase, anytime in rules()["_crash_steps"]:  # the activity before the detail
        if any(rx.search(f) for f in funcs):
            return step, phase, anytime
    return "", "", False


class NativeAssert:
    """A C++ assertion (``Assertion failed: <expr> (<file>:<line>)``) being read: the library
    and component from its file; start-up when a constructor is on the stack that follows
    (up to 12 lines after it)."""

    def __init__(self) -> None:
        self.pending: tuple[GenericFinding, int] | None = None

    def feed(self, lineno: int, s: str) -> list[GenericFinding]:
        """The assertions line ``s`` completes (the pending one when its stack ended)."""
        out: list[GenericFinding] = []
        if self.pending is not None:
            g, left = self.pending
            if _CTOR.search(s):
                g.phase = "startup"
            if left > 1 and not (_NATIVE_ASSERT.search(s) and lineno != g.line):
                self.pending = (g, left - 1)
                return out
            self.pending = None
            out.append(g)
            if not _NATIVE_ASSERT.search(s) or lineno == g.line:
                return out
        m = _NATIVE_ASSERT.search(s)
        if m is None:
            return out
        path = m.group("file")
        name = path.replace("\\", "/").split("/")[-1]
        engine = (
            "trtllm"
            if "tensorrt_llm" in path or "TensorRT-LLM" in s
            else engine_of_module("/" + path) or _engine_of_native(name + ":1] x") or "native"
        )
        comp = f"{engine} {name.rsplit('.', 1)[0]}"
        for rx, c in rules()["_components"]:
            if rx.match(name):
                comp = c["component"]
                break
        g = GenericFinding(
            id="native-assertion-generic",
            title=f"{engine} assertion failed in {name}: {m.group('expr')[:120]}",
            engine=engine,
            line=lineno,
            component=comp,
            text=s.strip()[:300],
            cause=f"The native check {m.group('expr')} ({path}:{m.group('ln')}) does not hold: an invariant of "
            f"{comp} that the configuration or the peer's state breaks (compare the values it names with "
            "the configuration).",
            checks=[f"the values in '{m.group('expr')[:80]}' as the configuration sets them (both sides)"],
            fix="Make the configuration satisfy the check (the expression names the values), or upgrade to a "
            "release that fixes it.",
        )
        if _CTOR.search(s):
            g.phase = "startup"
        self.pending = (g, 12)
        return out

    def finish(self) -> list[GenericFinding]:
        """The assertion still pending at the end of the log."""
        got, self.pending = self.pending, None
        return [got[0]] if got is not None else []


# ---------------------------------------------------------------- SIGKILL
# what reports that a process was ended by SIGKILL: a shell's job report (``Killed``, or
# bash's ``run.sh: line 3: 4242 Killed   python3 -m sglang.launch_server ...``), the
# kernel's OOM killer (``Out of memory: Killed process 4242 (python3)``), Kubernetes'
# container state (``Reason: OOMKilled``)
_KILLED = re.compile(
    r"^\s*(?:[^:\n]*: line \d+: +\d+ +)?Killed\b(?!\s+process)(?P<cmd>.*)$"
    r"|Out of memory: Kill(?:ed)? process (?P<pid>\d+)(?: \((?P<comm>[^)]*)\))?"
    r"|\b(?:Reason|reason)\W+OOMKilled\b|\bOOMKilled\b"
)


def killed_line(lineno: int, s: str) -> GenericFinding | None:
    """A report that a process was killed with SIGKILL (``_KILLED``), as a finding: the
    signal names no cause of its own, so the finding says who sends it to an SGLang
    server and how to tell them apart. One of SGLang's own: a failed scheduler or
    detokenizer child sends SIGQUIT to the launcher, whose handler
    (``launch_phase_sigquit_handler`` in ``srt/entrypoints/engine.py``, sglang 0.5.23)
    calls ``kill_process_tree`` (``srt/utils/common.py``): SIGKILL to every child, then
    to itself, so the shell prints ``Killed`` right after the child's traceback."""
    m = _KILLED.search(s)
    if m is None:
        return None
    oom = "OOMKilled" in s or m.group("pid") is not None
    what = "the kernel's OOM killer" if oom else "SIGKILL"
    return GenericFinding(
        id="process-oom-killed" if oom else "process-killed",
        title=(
            "the process was killed by the kernel's OOM killer (out of memory)"
            if oom
            else "the process was killed with SIGKILL (the shell's 'Killed')"
        ),
        engine="os",
        line=lineno,
        component="process exit (signal)",
        text=s.strip()[:300],
        cause=(
            "The kernel ended the process for lack of memory: the node's, or the container's memory limit "
            "(cgroup), was exhausted. KV transfer did not cause it by itself; host memory grows with the "
            "model load, pinned buffers and the host KV cache (--hicache-size / --hicache-ratio)."
            if oom
            else f"The process was ended by {what}, which no Python code can catch, so it prints no error of its "
            "own. It comes from outside the process: the kernel's OOM killer (host or container memory), a "
            "supervisor (Kubernetes after a failed liveness probe or on eviction, Slurm at the time limit), "
            "or SGLang's own teardown: a failed scheduler or detokenizer child sends SIGQUIT to the launcher, "
            "which logs 'Received sigquit from a child process' and SIGKILLs the process tree, itself last "
            "(launch_phase_sigquit_handler -> kill_process_tree, sglang 0.5.23)."
        ),
        checks=[
            "the lines just before it: a 'Scheduler hit an exception' traceback or 'Received sigquit from a child "
            "process' means SGLang tore itself down (explain that traceback instead)",
            "dmesg -T | grep -i -E 'out of memory|oom-kill'   # on the node, at that time",
            "kubectl describe pod POD | grep -A4 'Last State'   # Reason: OOMKilled / Exit Code: 137",
        ],
        fix=(
            "Give the server more memory (the container's memory limit, or fewer processes per node), or lower "
            "its host memory use (--hicache-size / --hicache-ratio, fewer pinned buffers)."
            if oom
            else "Find who sent it with the checks above: fix the child's traceback if SGLang tore itself down; "
            "raise the memory limit if the OOM killer did; lengthen the probe's timeout if Kubernetes did "
            "(model loading takes minutes)."
        ),
    )
