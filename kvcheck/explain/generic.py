"""General rules: explain a failure line no specific signature knows by its kind.

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
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

_PREFIXES = re.compile(
    r"^(?:\s*\((?:[A-Za-z][\w.]*(?:[ _][\w=.]+)*? )?pid=\d+(?:, "
    r"ip=[\d.]+)?\)\s*)+|^\s*(?:ERROR|INFO|WARNING|DEBUG|CRITICAL) \d\d-\d\d "
    r"\d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?"
    r"|^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z_]+\d+)*\] ?"
)
_TB = re.compile(r"Traceback \(most recent call last\):")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')
_EXC = re.compile(
    r"^(?P<qual>(?:[\w]+\.)*)(?P<type>[A-Za-z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(?P<msg>.*))?$"
)
_GLOG = re.compile(
    r"^\s*(?:(?P<lvl>[EF])(?:\d{4}|\d{8}) "
    r"\d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+|(?P<lvl2>[EF])\s+)?(?P<file>[\w]+\.(?:cpp|cc|h)):(?P<ln>\d+)\]? "
    r"+(?P<text>.*)"
)
_WC = re.compile(
    r"(?:cqe|completion|wc)\w* with (?:error|status)[ =:]*(?P<no>\d+)|\b(?P<str>transport retry counter "
    r"exceeded|local protection error|Work Request Flushed Error|remote access error|remote invalid request "
    r"error|RNR retry counter exceeded)\b",
    re.I,
)
_UCXLINE = re.compile(r"\b(?P<file>\w+\.c):\d+\s+UCX\s+(?:ERROR|FATAL)\s+(?P<text>.*)")
_NIXL_ERR = re.compile(r"\bNIXL_ERR_[A-Z_]+\b")
_NIXL_EXC = re.compile(r"\bnixl(?P<name>[A-Z]\w*)Error\b")
_REG = re.compile(
    r"(?:[Rr]egister(?:ing)? memory|ibv_reg_mr|reg_mr|registerMem|memory "
    r"registration)[^\n]*?(?::|failed:?)\s*(?P<str>[A-Z][a-z]+(?: [a-z]+)*)\s*\[(?P<no>\d+)\]"
)
_REG_BARE = re.compile(
    r"(?P<call>ibv_(?:reg|create|alloc)_\w+|reg_mr|mlx5dv_\w+)\([^)]*\) failed(?:, syndrome \w+)?: (?P<str>Cannot "
    r"allocate memory|Bad address|Invalid argument|Operation "
    r"not permitted)"
)
_SO = re.compile(r"(?P<obj>[\w.+-]+\.so)\S*: (?P<lib>lib[\w.+-]+?\.so[\d.]*): cannot open shared object file")
_NODEV = re.compile(
    r"No IB devices found|ibv_get_device_list failed|Device path /dev/infiniband/\S+ does not exist|No available "
    r"RNIC|No RDMA devices? (?:found|available)|Found 0 HCAs|no RDMA device"
)
_IPV6 = re.compile(r"(?<![\[\w:])(?P<addr>(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}):(?P<port>\d{2,5})\b(?!\])", re.I)
_FAILWORD = re.compile(r"fail|unable|cannot|could not|error", re.I)
# a line any rule below can read holds one of these (the per-line prefilter)
_HINTS = (
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
)
_INIT_FUNC = re.compile(
    r"^(?:__init__|init_\w+|_init\w*|initialize\w*|register\w*|_register\w*|load_\w+|setup\w*|_setup\w*|create_\w+|<module>)$"
)
_BOOT_FUNC = re.compile(r"bootstrap|_route|parallel_info|handshake|connect|ensure_parallel")
_LOOP_FUNC = re.compile(
    r"^event_loop\w*|^process_\w+|^run_batch$|^transfer_worker$|^send_kv\w*|^poll$|^recv\w*|^step$|^execute_model$"
    r"|^update_from_output$|^run_busy_loop$|^run_engine_core$"
)
# functions that move KV between the processes (SGLang's, vLLM's and TRT-LLM's connectors):
# a failure under them happens on a KV transfer
_XFER_FUNC = re.compile(
    r"^_?read_blocks$|^start_load_kv$|^_?nixl_handshake$|^add_remote_agent$|^_?background_nixl_handshake$"
    r"|^wait_for_save$|^get_finished$|^_?send_kv\w*$|^_?recv_kv\w*$|^transfer_worker$|^_?send_kvcache\w*$"
    r"|^_?pop_done_transfers$|^check_transfer_done$|^respond_and_return_transfer$|^_?transfer_kv\w*$"
)
# functions that only run while serving (statistics, metrics of finished steps)
_SERVE_FUNC = re.compile(r"^update_from_output$|^get_kv_connector_stats$|^\w*log_stats\w*$|^record_\w+stats\w*$")
# a refusal of the configuration (the message names what is unsupported and what to use)
_CONFIG_REFUSAL = re.compile(
    r"does not support|not supported|unsupported|please (?:use|set)|must be|is not compatible|incompatible", re.I
)
# the advice a refusal message gives ("..., please use trtllm on blackwell")
_ADVICE = re.compile(r"\b(?:[Pp]lease|[Tt]ry|[Cc]onsider) [^.;]{4,200}|(?<=[,;:] )(?:use|set|pass|add) [^.;]{4,200}")
# a C++ assertion as TRT-LLM, NIXL and others print it, with its source file
_NATIVE_ASSERT = re.compile(
    r"Assertion failed: (?P<expr>.+?) \((?P<file>[\w./\\-]+\.(?:cpp|cc|cu|h|hpp)):(?P<ln>\d+)\)"
)
# a C++ constructor frame (``CacheTransceiver::CacheTransceiver(``): the object is being built
_CTOR = re.compile(r"\b(\w+)::\1\(")
# a shared library a module needs is not on the host (``ImportError: libcudart.so.12: cannot open ...``)
_LIB_MISSING = re.compile(r"(?P<lib>lib[\w+-]+?\.so(?:\.(?P<major>\d+))?[\d.]*): cannot open shared object file")
# the statement that imported it (the source line under a frame, or a REPL line)
_IMPORT_STMT = re.compile(r"^\s*(?:>>>\s*)?(?:from\s+(?P<a>[\w.]+)\s+import\b|import\s+(?P<b>[\w.]+))")
# the dynamic loader finding a binary and its libraries of different builds
_UNDEF_SYM = re.compile(r"(?:symbol lookup error: (?P<obj>\S+?): )?undefined symbol: (?P<sym>[\w@.]+)")
# an import that fails: the package is not installed in this interpreter's environment
_NO_MODULE = re.compile(r"No module named '(?P<mod>[\w.]+)'")
# the PyPI package of a module people import (where the names differ)
_PKG_OF = {
    "sgl_kernel": "sgl-kernel",
    "mooncake": "mooncake-transfer-engine",
    "flashinfer": "flashinfer-python",
    "deep_ep": "deep-ep",
    "vllm_ascend": "vllm-ascend",
    "tensorrt_llm": "tensorrt-llm",
    "mori": "mori",
    "nixl": "nixl",
    "lmcache": "lmcache",
    "ucx_py": "ucx-py",
}


@functools.lru_cache(maxsize=1)
def rules() -> dict[str, Any]:
    text = resources.files("kvcheck.explain").joinpath("generic.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    data["_components"] = [(re.compile(c["re"]), c) for c in data["components"]]
    data["_modules"] = [(re.compile(m["re"]), m["subsystem"]) for m in data["sglang_modules"]]
    data["_api"] = [(re.compile(a["re"]), a) for a in data["nixl_api"]]
    data["_exc_kind"] = {t: k for k, ts in data["python_exceptions"].items() for t in ts}
    return data


_IBV_HEADER = re.compile(r"^\s*device\s+node GUID\s*$")
_IBV_DASHES = re.compile(r"^\s*-{4,}\s+-{4,}\s*$")
_IBV_ROW = re.compile(r"^\s*\w+\s+[0-9a-f]{16}\s*$")
_MEMLOCK = re.compile(r"max locked memory\s+\(kbytes, -l\)\s+(?P<v>\d+|unlimited)")


class NodeState:
    """What a node's own commands, pasted with the log, show (bounded state): ``ibv_devices``
    listing no device, the locked-memory limit of ``ulimit -a``. Their findings are
    ``node`` findings: the state the processes ran in, before any of the log's lines."""

    def __init__(self) -> None:
        self.armed = 0  # line of an ibv_devices header whose rows are being read
        self._dashes = False
        self.memlock = ""  # KB, as ulimit printed it ('' = not shown)
        self._done: set[str] = set()

    def feed(self, lineno: int, line: str) -> GenericFinding | None:
        s = line.rstrip()
        if self.armed:
            if not self._dashes:
                self._dashes = bool(_IBV_DASHES.match(s))
                if not self._dashes:
                    self.armed = 0
                return None
            if not s.strip():
                return None
            rows_seen = bool(_IBV_ROW.match(s))
            head = self.armed
            self.armed, self._dashes = 0, False
            if rows_seen or "ibv_devices" in self._done:
                return None
            self._done.add("ibv_devices")
            return GenericFinding(
                id="rdma-devices-not-visible",
                title="ibv_devices lists no RDMA device on this node/container",
                engine="rdma",
                line=head,
                phase="startup",
                component="RDMA device discovery (node state)",
                text="ibv_devices: no device",
                node=True,
                cause="ibv_devices, run where the server runs, lists no RDMA device: the process has no RDMA NIC "
                "to use (the container does not get /dev/infiniband or the RDMA device plugin, or the host has "
                "none), so RDMA transfers (Mooncake RDMA, UCX rc/dc, GPUDirect RDMA) are impossible there and "
                "the transfer engine fails or falls back to TCP.",
                checks=[
                    "ls -l /dev/infiniband; ibv_devinfo (inside the container)",
                    "the pod/docker spec: --device /dev/infiniband, the RDMA device plugin resource, --privileged",
                    "lsmod | grep -E 'nvidia_peermem|nv_peer_mem' on the host (GPUDirect RDMA)",
                ],
                fix="Give the server's container the RDMA devices (and GPUDirect RDMA on the host), or use a "
                "transport meant for no RDMA.",
            )
        if _IBV_HEADER.match(s):
            self.armed, self._dashes = lineno, False
            return None
        m = _MEMLOCK.search(s)
        if m:
            v = m.group("v")
            if v != "unlimited":
                self.memlock = v
                if int(v) < 1 << 20 and "memlock" not in self._done:
                    self._done.add("memlock")
                    return GenericFinding(
                        id="rdma-memlock-limited",
                        title=f"max locked memory is {v} KB (not unlimited)",
                        engine="rdma",
                        line=lineno,
                        phase="startup",
                        component="locked-memory limit (node state)",
                        text=s.strip()[:300],
                        node=True,
                        cause=f"The process may lock only {v} KB: RDMA registrations and verbs objects (CQs, QPs) "
                        "pin memory against this limit, and KV pools need far more; creating them fails with "
                        "ENOMEM (Cannot allocate memory).",
                        checks=[
                            "ulimit -l in the server's container",
                            "docker run --ulimit memlock=-1 / the pod's limits",
                        ],
                        fix="Set the locked-memory limit to unlimited for the server (docker --ulimit memlock=-1, "
                        "limits.conf memlock unlimited, systemd LimitMEMLOCK=infinity).",
                    )
        return None


@dataclass
class GenericFinding:
    id: str
    title: str
    engine: str
    line: int
    phase: str = ""  # '' = the caller's timeline decides
    component: str = ""
    cause: str = ""
    checks: list[str] = field(default_factory=list)
    fix: str = ""
    text: str = ""
    role: str = "cause"
    lines: list[int] = field(default_factory=list)
    node: bool = False  # from a node command's output pasted with the log (a precondition)


# ---------------------------------------------------------------- native stacks
# a crash header: the stack that follows it says where the process died
_CRASH_HEAD = re.compile(
    r"Caught signal (?P<sig>\d+) \((?P<what>[^):]*)|Segmentation fault|SIGSEGV|SIGABRT|SIGBUS|Aborted \(core dumped\)"
    r"|terminate called after throwing|\(gdb\) (?:bt|backtrace|thread apply all bt)|^Thread \d+ \(Thread 0x"
    r"|Fatal Python error: (?P<fatal>\w[\w ]*)"
)
# frames: gdb (``#3 0x.. in ns::Class::fn (args) at file.cpp:474`` / ``from lib.so``), glibc/UCX
# backtraces (`` 3  /path/libuct_ib.so.0(uct_rc_mlx5_ep_put_zcopy+0x1a0) [0x..]``), C++ throw
# traces (``2  0x7f.. tensorrt_llm::Foo::bar(int) + 76``)
_NFRAME = re.compile(
    r"^\s*#\d+\s+(?:0x[0-9a-f]+ in )?(?P<gfunc>[\w:~.<>]+?)(?:<[^(]*>)?\s*\((?:.*\)\s*(?:at (?P<gfile>\S+?):\d+|from "
    r"(?P<glib>\S+)))?"
    r"|^\s*\d+\s+(?P<blib>/\S+?\.so[\w.]*)\((?P<bfunc>[\w:.~]*)(?:\+0x[0-9a-f]+)?\)"
    r"|^\s*\d+\s+0x[0-9a-f]+ (?P<cfunc>[\w:~]+)\("
)
_NOISE = re.compile(
    r"^(?:__|_Unwind|_ZN?\d*__cxa|raise$|abort$|syscall$|killpg$|gsignal$|ucs_(?:handle_error|debug|error|log|fatal)"
    r"|ucs_\w*backtrace|std::|__gnu_cxx|asio::|boost::|fmt::|spdlog::|folly::|PyObject_|_Py|Py[A-Z]|cfunction_|method_vectorcall"
    r"|ucm_|pthread_|start_thread|clone|sigtramp|\?\?)"
)
_NOISE_LIB = re.compile(r"lib(?:c|pthread|gcc_s|stdc\+\+|unwind|python[\d.]*|dl|m|ucs|ucm)[.-]|/python\d|ld-linux")
# (pattern on the function or library, engine, component); the first that matches names it
_NATIVE_PLACES = [
    (r"mooncake::(?P<cls>\w+)|libtransfer_engine|mooncake", "mooncake", ""),
    (r"nixlUcx|libplugin_UCX|ucx_backend", "nixl", "NIXL UCX backend"),
    (r"nixl\w*|libnixl", "nixl", "NIXL agent"),
    (r"uct_(?:rc|dc|ud|ib)\w*|libuct_ib", "ucx", "UCX InfiniBand/RoCE transport (RDMA)"),
    (r"uct_tcp\w*", "ucx", "UCX TCP transport"),
    (r"uct_cuda\w*|libuct_cuda", "ucx", "UCX CUDA transports (cuda_copy / cuda_ipc)"),
    (r"uct_\w+|ucp_\w+|libuc[pt]", "ucx", "UCX protocol layer (ucp)"),
    (r"tensorrt_llm::(?P<tcls>[\w:]+)", "trtllm", "TensorRT-LLM"),
    (r"libcuda\.|cu[A-Z]\w+$", "cuda", "the CUDA driver"),
    (r"nccl\w*|libnccl", "nccl", "NCCL"),
    (r"deep_ep|hybrid_ep|libdeep_ep", "deepep", "DeepEP"),
    (r"c10::|at::|torch::|libtorch|libc10", "torch", "PyTorch"),
    (r"fi_\w+|libfabric|efa_\w+", "libfabric", "libfabric / EFA"),
]
_NATIVE_PLACES_RX = [(re.compile(p), e, c) for p, e, c in _NATIVE_PLACES]


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
                func = m.group("gfunc") or m.group("bfunc") or m.group("cfunc") or ""
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
            for rx, engine, comp in _NATIVE_PLACES_RX:
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
                return GenericFinding(
                    id="native-crash-generic",
                    title=f"native crash in {where} ({comp})",
                    engine=engine,
                    line=line,
                    component=comp,
                    text=head,
                    cause=f"The process died in native code: the first frame outside the C library, the unwinder and "
                    f"the signal handler is {where}" + (f" ({file})" if file else "") + f", in {comp}. The crash is "
                    f"that component's, not the Python code's above it.",
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


def _strip(line: str) -> str:
    m = _PREFIXES.match(line)
    while m is not None and m.end() > 0:
        line = line[m.end() :]
        m = _PREFIXES.match(line)
    return line


def engine_of_module(path: str) -> str:
    p = path.replace("\\", "/")
    for eng, key in (
        ("dynamo", "/dynamo/"),
        ("sglang", "/sglang/"),
        ("vllm-ascend", "/vllm_ascend/"),
        ("vllm", "/vllm/"),
        ("trtllm", "/tensorrt_llm/"),
        ("lmcache", "/lmcache/"),
        ("nixl", "/nixl"),
        ("mooncake", "/mooncake/"),
    ):
        if key in p:
            return eng
    return ""


def sglang_subsystem(path: str) -> str:
    p = path.replace("\\", "/")
    for rx, sub in rules()["_modules"]:
        m = rx.search(p)
        if m:
            return sub.format(**{k: v for k, v in m.groupdict().items() if v})
    return ""


def nixl_step(text: str) -> tuple[str, str]:
    for rx, a in rules()["_api"]:
        if rx.search(text):
            return a["step"], a["phase"]
    return "", ""


class GenericReader:
    """Line-by-line, bounded state: the open traceback (its frames, at most 64 kept)."""

    def __init__(self) -> None:
        self.found: list[GenericFinding] = []
        self._tb_line = 0
        self._frames: list[tuple[str, str, str]] = []
        self._src = ""  # the source line shown under the last frame
        self._expect_src = False
        self._lone: tuple[int, str, int, int] | None = None  # (line, text, indent, lines joined)
        self._seen: set[str] = set()
        self.node = NodeState()
        self.stack = NativeStack()
        self._last_import = ""  # the module the last import statement seen named
        self._assert: tuple[GenericFinding, int] | None = None  # a native assertion, its stack being read

    # ------------------------------------------------------------------ per line
    def feed(self, lineno: int, line: str) -> None:
        if self.stack.head_line or "ig" in line or "ault" in line or "bort" in line or "gdb" in line or "atal" in line:
            got = self.stack.feed(lineno, line)
            if got is not None:
                self._add(got)
        if self.node.armed or "evice" in line or "locked" in line or "ulimit" in line:
            got = self.node.feed(lineno, line)
            if got is not None:
                self._add(got)
        if self._lone is not None:
            if self._continue_lone(line):
                return
        if not self._tb_line and (not any(k in line for k in _HINTS) or "batch, #" in line):
            return  # one search per line outside a traceback; batch statistics never fail
        s = _strip(line).rstrip()
        if not s:
            return
        if _TB.search(s):
            self._close(lineno, None)
            self._tb_line, self._frames, self._src = lineno, [], ""
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
                    self._frames.append((fr.group("path"), fr.group("line"), fr.group("func")))
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
            if self._assert is not None or ("Assertion failed" in s and _NATIVE_ASSERT.search(s)):
                self._native_assert(lineno, s)
                return
            self._native(lineno, s)

    def _native_assert(self, lineno: int, s: str) -> None:
        """A C++ assertion (``Assertion failed: <expr> (<file>:<line>)``): the library and
        component from its file; start-up when a constructor is on the stack that follows."""
        if self._assert is not None:
            g, left = self._assert
            if _CTOR.search(s):
                g.phase = "startup"
            if left > 1 and not (_NATIVE_ASSERT.search(s) and lineno != g.line):
                self._assert = (g, left - 1)
                return
            self._assert = None
            self._add(g)
            if not _NATIVE_ASSERT.search(s) or lineno == g.line:
                return
        m = _NATIVE_ASSERT.search(s)
        if m is None:
            return
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
        self._assert = (g, 12)

    def finish(self) -> list[GenericFinding]:
        got = self.stack.close()
        if got is not None:
            self._add(got)
        if self._lone is not None:
            self._flush_lone()
        if self._assert is not None:
            self._add(self._assert[0])
            self._assert = None
        if self.node.memlock:  # the ulimit output pasted with the log says which limit
            for g in self.found:
                if g.id == "rdma-register-enomem" and "max locked memory" not in g.cause:
                    g.cause += f" The log shows max locked memory {self.node.memlock} KB."
        self._close(0, None)
        return self.found

    def _continue_lone(self, line: str) -> bool:
        """Whether ``line`` continues the pending lone exception message (same indentation,
        plain text); closes it otherwise."""
        assert self._lone is not None
        lineno, text, indent, n = self._lone
        s = _strip(line).rstrip()
        st = s.strip()
        if (
            st
            and n < 4
            and len(s) - len(s.lstrip()) == indent
            and not _EXC.match(st)
            and not _FRAME.match(s)
            and not _TB.search(s)
            and not _GLOG.match(s)
            and not st.startswith(("[", "(", "#", "$"))
            and not text.endswith((".", "!"))
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
            self._native_assert(lineno, text)
            return
        self._tb_line, self._frames = lineno, []
        self._close(lineno + n, ex, lone=True)

    # ------------------------------------------------------------------ tracebacks
    def _close(self, lineno: int, ex: re.Match[str] | None, lone: bool = False) -> None:
        src, self._src, self._expect_src = self._src, "", False
        if ex is None and self._frames and src.startswith("assert "):
            # a traceback cut after its failing assert: the assert statement is the message
            ex = _EXC.match("AssertionError: " + src)
        elif ex is not None and ex.group("type") == "AssertionError" and not ex.group("msg") and src:
            ex = _EXC.match("AssertionError: " + src)  # a bare AssertionError: the statement says what
        if not self._tb_line or (not self._frames and ex is None) or (not self._frames and not lone):
            self._tb_line, self._frames = 0, []
            return
        R = rules()
        frames, tb_line = self._frames, self._tb_line
        self._tb_line, self._frames = 0, []
        etype = ex.group("type") if ex else ""
        msg = (ex.group("msg") or "").strip() if ex else ""
        own = [f for f in frames if engine_of_module(f[0]) not in ("", "nixl")] or frames or [("", "", "")]
        path, ln, func = own[-1]
        engine = engine_of_module(path) or ("python" if path else "")
        sub = sglang_subsystem(path) if engine == "sglang" else ""
        where = (
            f"{re.split(r'(?:site|dist)-packages/|/python/', path)[-1]}:{ln} in {func}" if path else "(no frame shown)"
        )
        funcs = [f[2] for f in frames] + re.findall(r"(\w+)\(", src)[:1]  # and what the innermost line calls
        phase = ""
        if any(_XFER_FUNC.match(f) for f in funcs):
            phase = "first-transfer"
        elif any(_SERVE_FUNC.match(f) for f in funcs):
            phase = "serving"
        elif any(_INIT_FUNC.match(f) for f in funcs) and not any(_LOOP_FUNC.match(f) for f in funcs):
            phase = "startup"
        elif any(_BOOT_FUNC.search(f) for f in funcs):
            phase = "first-request"
        kind = R["_exc_kind"].get(etype, "refusal" if etype else "")
        if not phase and not frames and kind == "refusal" and _CONFIG_REFUSAL.search(msg):
            phase = "startup"  # a configuration refused, pasted alone: raised while the engine is built
        lm = _LIB_MISSING.search(msg) if etype in ("ImportError", "OSError") else None
        if lm is not None:
            ims = _IMPORT_STMT.match(src)
            mod = (ims.group("a") or ims.group("b") or "") if ims else ""
            mod = (
                mod
                or self._last_import
                or next((e for e in (engine_of_module(f[0]) for f in reversed(frames)) if e), "")
            )
            self._add(_library_missing(lm, mod, engine, where, tb_line, lineno, ex.group(0) if ex else ""))
            return
        nm = _NO_MODULE.search(msg) if etype in ("ModuleNotFoundError", "ImportError") else None
        if nm is not None:
            self._add(_module_missing(nm.group("mod"), engine, where, tb_line, lineno, ex.group(0) if ex else ""))
            return
        nixl = _NIXL_ERR.search(msg) or (_NIXL_EXC.search(ex.group(0)) if ex else None)
        if nixl is not None:
            step, ph = nixl_step(" ".join(funcs))
            code = nixl.group(0) if nixl.group(0).startswith("NIXL_ERR") else _nixl_code(nixl.group("name"))
            meaning = R["nixl_status"].get(code, "")
            self._add(
                GenericFinding(
                    id="nixl-status-generic",
                    title=f"{code} from NIXL" + (f" during {step}" if step else ""),
                    engine="nixl",
                    line=tb_line,
                    phase=ph or phase,
                    component=f"NIXL ({step})" if step else "NIXL",
                    text=ex.group(0)[:300] if ex else "",
                    cause=f"{code}: {meaning}. Raised at {where}.",
                    checks=[
                        "the backend's own error line just before the traceback (UCX/LIBFABRIC)",
                        "python -c 'import nixl_cu12, nixl_cu13' and pip list | grep -i nixl (one NIXL, matching CUDA)",
                    ],
                    fix="Explain the backend line that precedes it; it names the cause NIXL reports as " + code + ".",
                    lines=[tb_line, lineno],
                )
            )
            return
        what = {
            "code": "a code-level mismatch: the code calls an attribute/argument/name that does not exist there — a "
            "bug on a path few configurations reach, or two packages of different releases (the engine vs. "
            "its wrapper/connector/library)",
            "state": "a lookup of a state that is not (or no longer) there: a request, room, agent or block removed "
            "before it was used, a duplicate, or a peer that restarted",
            "invariant": "an internal invariant broken: the code's assumption about the configuration or the peer's "
            "state does not hold (compare both sides' flags)",
            "refusal": "an error the code raised on purpose: its message is the cause",
            "network": "a network failure between the processes (address, port, firewall, a peer down)",
            "gpu": "a GPU memory/driver failure",
        }.get(kind, "the traceback was cut before its exception line")
        head = f"{etype}: {msg}"[:200] if etype else "traceback without its exception line"
        mm = _API_MISMATCH.match(msg) if etype == "TypeError" else None
        callee = _callee_engine(mm.group("callee"), path) if mm else ""
        if mm and callee and callee != engine:
            arg = mm.group("arg") or ""
            who = engine or "the caller (its frames are not shown)"
            self._add(
                GenericFinding(
                    id="api-version-mismatch",
                    title=f"{who} calls {mm.group('callee')}() of {callee} with arguments it does not take",
                    engine=engine or callee,
                    line=tb_line,
                    phase=phase,
                    component=f"{engine or 'caller'} -> {callee} API",
                    text=ex.group(0)[:300] if ex else "",
                    lines=[tb_line, lineno] if lineno else [tb_line],
                    cause=f"{head} at {where}: {who} calls {callee}'s {mm.group('callee')}()"
                    + (f" with '{arg}'" if arg else "")
                    + f", which the installed {callee} does not accept: the two are of releases that do not go "
                    f"together ({callee} older or newer than the caller expects).",
                    checks=[
                        f"pip show {engine or '<caller>'} {callee}   # the versions installed",
                        f"the caller's requirements for {callee} (its release notes / pyproject pin)",
                    ],
                    fix=f"Install the {callee} release the caller was built against (or the caller's release "
                    f"matching the installed {callee}).",
                )
            )
            return
        if engine == "sglang":
            comp = f"SGLang, {sub}" if sub else "SGLang"
        else:
            comp = engine
        checks = [
            f"the release: pip show {'sglang' if engine == 'sglang' else engine}; the line numbers ({where}) against "
            "that release's source"
        ]
        if kind == "code":
            checks.append(
                f"the release notes / issues of {engine} for {func} and {etype}: a later release may fix it; the "
                f"flags that reach {sub or func}"
            )
        elif kind == "state":
            checks.append(
                "what removed it first: an earlier error, a timeout, an abort, or the peer restarting (read the "
                "lines before)"
            )
        elif not etype:
            checks.insert(0, "the traceback's last line (Type: message), which the paste does not show")
        self._add(
            GenericFinding(
                id="python-exception-generic",
                title=f"{engine} traceback: {head}",
                engine=engine,
                line=tb_line,
                phase=phase,
                component=comp,
                text=ex.group(0)[:300] if ex else "",
                lines=[tb_line, lineno] if lineno else [tb_line],
                cause=f"{head} at {where}" + (f" ({sub})" if sub else "") + f": {what}.",
                checks=checks,
                fix=(
                    "Upgrade to a release that fixes it, or avoid the flag that reaches it; report it with the "
                    "traceback and the release."
                    if kind == "code"
                    else f"What the message itself asks: {advice.group(0).rstrip('.')}."
                    if (advice := _ADVICE.search(msg)) is not None
                    else "Find and fix what the exception reports (see the checks)."
                ),
            )
        )

    # ------------------------------------------------------------------ native lines
    def _native(self, lineno: int, s: str) -> None:
        R = rules()
        us = _UNDEF_SYM.search(s) if "undefined symbol" in s else None
        if us is not None:
            got = _undefined_symbol(us, lineno, s)
            if got is not None and got.id not in self._seen:
                self._seen.add(got.id)
                self._add(got)
            return
        m = (_REG.search(s) or _REG_BARE.search(s)) if ("egister" in s or "reg_mr" in s or "ibv_" in s) else None
        if m:
            no = m.groupdict().get("no") or {
                "Cannot allocate memory": "12",
                "Bad address": "14",
                "Invalid argument": "22",
                "Operation not permitted": "1",
            }.get(m.group("str"), "")
            row = R["register_errno"].get(no)
            if row:
                name, fid, meaning = row
                call = m.groupdict().get("call") or ""
                verbs = bool(call) and not call.endswith("reg_mr") and "reg_" not in call
                if verbs and name != "ENOMEM":
                    return
                if verbs:  # a verbs object (CQ, QP, PD ...) also pins memory: the same limit
                    meaning = "locked-memory limit: " + call + " pins its queue memory, which counts against "
                    meaning += "RLIMIT_MEMLOCK (ulimit -l, the container's memlock) like a registration does"
                self._add(
                    GenericFinding(
                        id=fid,
                        title=(f"{call}() failed" if verbs else "memory registration for RDMA failed")
                        + f" with {name} ({m.group('str')})",
                        engine=_engine_of_native(s),
                        line=lineno,
                        phase="startup",
                        component="RDMA memory registration",
                        text=s[:300],
                        cause=f"{call or 'ibv_reg_mr'} returned {name}: {meaning}.",
                        checks=[
                            "ulimit -l (in the container: unlimited); cat /proc/$(pgrep -f sglang | head -1)/limits "
                            "| grep locked",
                            "lsmod | grep -E 'nvidia_peermem|nv_peer_mem'; the GPU memory kind registered (VRAM: "
                            "GPUDirect RDMA needed)",
                            "echo $PYTORCH_CUDA_ALLOC_CONF (expandable_segments makes VMM memory)",
                        ],
                        fix={
                            "ENOMEM": "Raise the locked-memory limit (ulimit -l unlimited / docker --ulimit "
                            "memlock=-1) or register less (fewer devices, smaller segments).",
                            "EPERM": "Run with the privilege the RDMA driver needs (root or CAP_IPC_LOCK).",
                            "EACCES": "Run with the privilege the RDMA driver needs (root or CAP_IPC_LOCK).",
                        }.get(
                            name,
                            "Enable GPUDirect RDMA (nvidia_peermem or dma-buf) or register host memory; do not use "
                            "expandable_segments for the KV pool.",
                        ),
                    )
                )
                return
        m = _SO.search(s) if "shared object" in s else None
        if m:
            lib = m.group("lib")
            why = (
                "the CUDA runtime/driver this build needs is not on the host (a CUDA build on a non-CUDA host, or a "
                "cu12 wheel on a CUDA-13-only host)"
                if re.match(r"libcud|libcublas|libnv", lib)
                else "UCX's libraries are not where the plugin looks (LD_LIBRARY_PATH, a wheel's bundled libs moved, "
                "a second UCX)"
                if lib.startswith("libuc")
                else "libfabric (EFA) is not installed"
                if "fabric" in lib
                else "a dependency of the plugin is missing"
            )
            self._add(
                GenericFinding(
                    id="native-plugin-missing-library",
                    title=f"{m.group('obj')} cannot load: {lib} missing",
                    engine=_engine_of_native(s) or "nixl",
                    line=lineno,
                    phase="startup",
                    component="plugin loading",
                    text=s[:300],
                    role="cause",
                    cause=f"The plugin {m.group('obj')} needs {lib}, which the loader cannot find: {why}. A plugin "
                    "the transfer does not use is harmless; the one it uses (UCX, LIBFABRIC) is not.",
                    checks=[
                        f"ldd <plugin dir>/{m.group('obj')} | grep 'not found'",
                        "pip list | grep -i -E 'nixl|cuda'; nvidia-smi (the driver's CUDA version)",
                    ],
                    fix="Install the wheel built for this host's CUDA (nixl-cu12 / nixl-cu13), or the missing "
                    "library; on a host without CUDA, a build without the CUDA plugins.",
                )
            )
            return
        w = (
            _WC.search(s)
            if ("cqe" in s or "ompletion" in s or "exceeded" in s or "error" in s or "Error" in s)
            else None
        )
        if w:
            rows = R["wc_status"]
            no = w.group("no") or next(
                (k for k, v in rows.items() if v[1].lower() == (w.group("str") or "").lower()), ""
            )
            row = rows.get(no)
            if row:
                nic = re.search(r"local_nic: (\w+)", s)
                self._add(
                    GenericFinding(
                        id=f"rdma-wc-{row[0][7:].lower().replace('_', '-')}",
                        title=f"RDMA work completion failed: {row[1]} ({row[0]})",
                        engine=_engine_of_native(s) or "rdma",
                        line=lineno,
                        phase="first-transfer",
                        component="RDMA transfer (work completion)",
                        text=s[:300],
                        role="consequence" if no == "5" else "cause",
                        cause=f"{row[0]} ({row[1]})"
                        + (f" on local NIC {nic.group(1)}" if nic else "")
                        + f": {row[2]}.",
                        checks=[
                            "ibstat / ibv_devinfo: the port state and link of the local NIC named",
                            "ib_send_bw / ib_write_bw between that local NIC and the peer's NIC",
                            "show_gids on both hosts (RoCE: the GID index and its IP version)",
                        ],
                        fix="Take the failing NIC out of the device list (--disaggregation-ib-device / MC device "
                        "names) or repair its path; pair only NICs that reach each other.",
                    )
                )
                return
        if ("evice" in s or "RNIC" in s or "HCAs" in s) and _NODEV.search(s):
            self._add(
                GenericFinding(
                    id="rdma-devices-not-visible",
                    title="the process sees no usable RDMA device",
                    engine=_engine_of_native(s) or "mooncake",
                    line=lineno,
                    phase="startup",
                    component="RDMA device discovery",
                    text=s[:300],
                    cause="No RDMA device is usable by this process: the container does not get the devices "
                    "(/dev/infiniband not mounted, no RDMA device plugin), the host has none, or the "
                    "library's device check skips them"
                    + (
                        " (the check looks for /dev/infiniband/<ibdev>; hosts that expose only uverbsN nodes fail "
                        "it: Mooncake#1375, reported as a regression in Mooncake#1391)"
                        if "Device path" in s
                        else ""
                    )
                    + ".",
                    checks=[
                        "ibv_devices; ls -l /dev/infiniband (inside the container)",
                        "the pod/docker spec: --device /dev/infiniband, the RDMA device plugin, --privileged",
                    ],
                    fix="Give the process the RDMA devices, or use TCP transport where no RDMA is meant to be used.",
                )
            )
            return
        if s.count(":") >= 4 and _FAILWORD.search(s):
            m6 = _IPV6.search(s)
            if m6 and m6.group("addr").count(":") >= 3:
                self._add(
                    GenericFinding(
                        id="peer-address-ipv6-literal",
                        title="a peer address is an IPv6 literal without brackets",
                        engine=_engine_of_native(s),
                        line=lineno,
                        phase="first-transfer",
                        component="peer address / handshake",
                        text=s[:300],
                        cause=f"The peer address {m6.group('addr')}:{m6.group('port')} is an IPv6 address written "
                        "host:port without brackets; parsers that split at the last ':' or resolve it as a "
                        "host name fail, so the handshake never starts.",
                        checks=[
                            "the host IP each side advertises (hostname -I; the local_hostname / bootstrap host "
                            "settings)"
                        ],
                        fix="Advertise an IPv4 address (or a resolvable host name) for the transfer engine, or a "
                        "release that brackets IPv6 addresses.",
                    )
                )
                return
        g = _GLOG.match(s) if ".c" in s or ".h:" in s else None
        if g and not (g.group("lvl") or g.group("lvl2")) and not _FAILWORD.search(g.group("text")):
            g = None  # a bare file:line without a level is read only when it reports a failure
        u = None if g or "UCX" not in s else _UCXLINE.search(s)
        if g or u:
            m = g or u
            assert m is not None
            f = m.group("file")
            text = m.group("text")
            for rx, c in R["_components"]:  # noqa: B007 - c, the matched component, is read after the break
                if rx.match(f):
                    break
            else:
                return
            meaning, code = "", ""
            nx = _NIXL_ERR.search(text)
            if nx:
                code, meaning = nx.group(0), R["nixl_status"].get(nx.group(0), "")
            for k, (uname, umean) in R["ucx_status"].items():
                if k in text:
                    code, meaning = uname, umean
                    break
            step, ph = nixl_step(text) if c["engine"] == "nixl" else ("", "")
            comp = c["component"] + (f", {step}" if step else "")
            phase = ph or (c["phase"] if c["phase"] != "any" else "")
            key = f"{c['engine']}:{f}:{code}"
            if key in self._seen:
                return
            self._seen.add(key)
            self._add(
                GenericFinding(
                    id="native-error-generic",
                    title=f"{c['engine']} error in {comp}" + (f": {code}" if code else ""),
                    engine=c["engine"],
                    line=lineno,
                    phase=phase,
                    component=comp,
                    text=s[:300],
                    cause=f"{comp} reported: {text[:200]}" + (f" ({code}: {meaning})" if meaning else "") + ".",
                    checks=[_question(c["engine"], comp)],
                    fix="Check what the component needs (see the checks); kvcheck has no specific signature for this "
                    "text.",
                )
            )

    def _add(self, f: GenericFinding) -> None:
        if len(self.found) < 200:
            self.found.append(f)


_API_MISMATCH = re.compile(
    r"(?P<callee>[\w.]+)\(\) (?:got an unexpected keyword argument '(?P<arg>\w+)'|missing \d+ required "
    r"(?:positional|keyword-only) arguments?|takes \d+ positional arguments? but \d+ were given)"
)
_CALLEE_PKG = (
    ("nixl", "nixl"),
    ("TransferEngine", "mooncake"),
    ("mooncake", "mooncake"),
    ("lmcache", "lmcache"),
    ("LMCache", "lmcache"),
)


def _callee_engine(callee: str, caller_path: str) -> str:
    """The package whose API the call names: by the callee's own name, or, for a Dynamo
    handler, the engine it hosts (its ``engine`` object)."""
    for token, pkg in _CALLEE_PKG:
        if token in callee:
            return pkg
    p = caller_path.replace("\\", "/")
    if "/dynamo/" in p and re.match(r"(?:Engine|AsyncLLM|LLM|AsyncEngine|engine)\b", callee):
        for eng in ("sglang", "vllm", "trtllm"):
            if f"/dynamo/{eng}/" in p:
                return eng
    return ""


def _library_missing(
    m: re.Match[str], mod: str, engine: str, where: str, tb_line: int, lineno: int, text: str
) -> GenericFinding:
    """``ImportError: libX.so.N: cannot open shared object file`` while importing ``mod``:
    the module's package was built against a library the host lacks; for the CUDA
    libraries, a wheel for another CUDA major."""
    lib, major = m.group("lib"), m.group("major")
    top = mod.split(".")[0] if mod else ""
    pkg = _PKG_OF.get(top, top.replace("_", "-")) if top else ""
    cuda = bool(re.match(r"lib(?:cudart|cublas\w*|cufft|curand|cusparse|cusolver|nvrtc|nvJitLink|cuda)\b", lib))
    who = f"the package {pkg} (import {mod})" if pkg else "the module being imported"
    if cuda and major:
        fid = f"{top.replace('_', '-')}-cuda-major-wheel-mismatch" if top else "cuda-major-wheel-mismatch"
        cause = (
            f"{who} is a build for CUDA {major} (it links {lib}) and this host/image has no CUDA {major} runtime: "
            f"the wheel of another CUDA major was installed."
        )
        fix = f"Install the build of {pkg or 'the package'} for the CUDA major of the image (e.g. its -cu13 / cu12 "
        fix += "wheel or extra), or add the CUDA runtime it was built for."
    else:
        fid = "native-library-missing"
        cause = f"{who} needs {lib}, which the dynamic loader cannot find (not installed, or not on LD_LIBRARY_PATH)."
        fix = f"Install the library that provides {lib} (or fix LD_LIBRARY_PATH) for {pkg or 'the module'}."
    return GenericFinding(
        id=fid,
        title=f"import of {mod or 'a module'} fails: {lib} missing",
        engine=engine if engine not in ("", "python") else (top or "python"),
        line=tb_line,
        phase="startup",
        component="shared libraries of an installed package",
        text=text[:300],
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=cause,
        checks=[
            f"python -m pip show {pkg or '<package>'}  # which build (cu12 / cu13) is installed",
            "nvidia-smi; ls /usr/local/cuda*/lib64/libcudart.so*  # the CUDA the image has",
        ],
        fix=fix,
    )


# symbol prefixes -> the library family that exports them
_SYM_FAMILY = [
    (re.compile(r"^(?:ucs|ucp|uct|ucm)_"), "ucx", "UCX"),
    (re.compile(r"nixl", re.I), "nixl", "NIXL"),
    (re.compile(r"^_ZN\d*(?:c10|at|torch)|^_ZNK\d*(?:c10|at|torch)"), "torch", "PyTorch"),
    (re.compile(r"^(?:cu[A-Z]|cuda)"), "cuda", "CUDA"),
    (re.compile(r"^(?:ibv_|mlx5)"), "rdma-core", "rdma-core (libibverbs)"),
]


def _undefined_symbol(m: re.Match[str], lineno: int, s: str) -> GenericFinding | None:
    """``undefined symbol: S``: the object was built against another build of the library
    that exports S than the one the loader found (two installations mixed, or a package
    built for another release)."""
    sym, obj = m.group("sym"), m.group("obj") or ""
    got = next(((fam, name) for rx, fam, name in _SYM_FAMILY if rx.search(sym)), None)
    if got is None:
        return None
    fam, name = got
    two = fam in ("ucx", "nixl")
    return GenericFinding(
        id=f"{fam}-multiple-installations" if two else f"{fam}-abi-mismatch",
        title=f"undefined symbol {sym[:80]}" + (f" in {obj}" if obj else "") + f": two {name} builds mixed",
        engine=fam if fam in ("ucx", "nixl") else _engine_of_native(s) or fam,
        line=lineno,
        phase="startup",
        component=f"{name} shared libraries (dynamic loading)",
        text=s.strip()[:300],
        cause=f"{obj or 'A binary'} needs {sym}, which the {name} library the loader found does not export: the binary "
        f"and the library come from different {name} builds"
        + (
            " (two installations on the host, e.g. one in /usr and one in /usr/local or a wheel's bundled copy)."
            if two
            else " (an extension built against another release)."
        ),
        checks=[
            f"ldd {obj or '<binary>'} | grep -E 'libuc|nixl|torch|cuda'   # which copy of each library is loaded",
            "LD_LIBRARY_PATH / ldconfig -p: every directory holding a copy",
        ],
        fix=f"Use one {name}: remove the other installation or point LD_LIBRARY_PATH at the one the binary was built "
        "with (or rebuild it against the installed one).",
    )


def _module_missing(mod: str, engine: str, where: str, tb_line: int, lineno: int, text: str) -> GenericFinding:
    """``No module named 'X'``: X's package is not installed for this interpreter (or,
    for a submodule of an installed package, the install is partial / for another platform)."""
    top = mod.split(".")[0]
    pkg = _PKG_OF.get(top, top.replace("_", "-"))
    sub = "." in mod and top in _PKG_OF
    who = engine if engine not in ("", "python") else "the process"
    if sub:
        cause = (
            f"{who} imports {mod}: the package {pkg} is there but its module {mod} is not — a partial install, "
            f"or a wheel built for another Python/CUDA (its compiled part missing)."
        )
        fix = f"Reinstall {pkg} for this interpreter and CUDA (pip install --force-reinstall {pkg})."
        fid = f"{top.replace('_', '-')}-install-broken"
    else:
        cause = (
            f"{who} imports {top} ({where}) and the package {pkg} is not installed in the Python environment "
            f"this process runs (or is installed for another interpreter / virtual env)."
        )
        fix = f"pip install {pkg} in the environment that runs the server (the same python -m pip)." + (
            " NIXL: pip install nixl (it pulls the wheel matching CUDA 12/13)." if top == "nixl" else ""
        )
        fid = f"{top.replace('_', '-')}-not-installed"
    return GenericFinding(
        id=fid,
        title=f"module {mod} not found: {pkg} " + ("install broken" if sub else "not installed"),
        engine=engine or "python",
        line=tb_line,
        phase="startup",
        component="Python environment (installed packages)",
        text=text[:300],
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=cause,
        checks=[
            f"python -c 'import {mod}' with the server's interpreter",
            f"python -m pip show {pkg}; which python",
        ],
        fix=fix,
    )


def _nixl_code(name: str) -> str:
    return "NIXL_ERR_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper().replace("CANCELLED", "CANCELED")


def _engine_of_native(s: str) -> str:
    g = _GLOG.match(s)
    if g:
        for rx, c in rules()["_components"]:
            if rx.match(g.group("file")):
                return c["engine"]
    if "UCX" in s:
        return "ucx"
    if "nixl" in s.lower():
        return "nixl"
    if "mooncake" in s.lower() or "transfer_engine" in s:
        return "mooncake"
    return ""


def _question(engine: str, comp: str) -> str:
    if engine == "mooncake":
        return (
            "ibv_devices / show_gids on both hosts; the --disaggregation-ib-device list vs. the NICs that reach "
            "the peer (ib_send_bw between the pair); MC_* variables set"
        )
    if engine == "nixl":
        return (
            "UCX_LOG_LEVEL=info for the backend's transports; pip list | grep nixl (one NIXL, matching CUDA); the "
            "peer agent alive and its metadata loaded"
        )
    return (
        "ucx_info -d (the transports and devices UCX sees); UCX_TLS / UCX_NET_DEVICES on both sides; ucx_info -v "
        "(one UCX)"
    )
