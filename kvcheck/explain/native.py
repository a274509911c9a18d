"""General rules for native lines: what a C/C++ library printed, and native crashes.

- an error line of a native library (glog of NIXL's or Mooncake's C++ files, UCX's
  ``file.c:N UCX ERROR``): the library and the component from its source file, NIXL's API
  step from the function it names, and the meaning of the status it prints (``NIXL_ERR_*``,
  UCX status strings);
- errno of a memory registration (ENOMEM = locked-memory limit, EFAULT/EINVAL = GPU memory
  not registrable for RDMA, EPERM = privilege), RDMA work-completion statuses, a plugin
  whose shared library is missing, RDMA devices the process cannot see, a peer address
  that is an unbracketed IPv6 literal, an undefined symbol (two builds mixed);
- C++ assertions (``Assertion failed: <expr> (<file>:<line>)``), start-up when a
  constructor is on the stack that follows;
- native crash stacks (gdb, UCX/glibc backtraces, C++ throw traces): the first frame
  outside libc, the unwinder and the signal handler names the library that died;
- the node's own command outputs pasted with the log (``ibv_devices``, ``ulimit -a``).

Each yields a ``rulebase.GenericFinding``.
"""

from __future__ import annotations

import re

from kvcheck.explain.rulebase import GenericFinding, engine_of_module, nixl_step, rules

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
# a registration reported with errno as ``errno:22 (Invalid argument)`` / ``errno=12`` (MoRI,
# custom RDMA code): "Register...MemoryRegion failed! ... errno:22"
_REG_ERRNO = re.compile(
    r"(?:[Rr]egister\w*(?:Memory|MemoryRegion|Mr|MR)\w*|ibv_reg_\w+|reg_mr)\b[^\n]*?(?:failed|error)[^\n]*?"
    r"errno\s*[:=]\s*(?P<no>\d+)(?:\s*\((?P<str>[A-Za-z ]+)\))?"
)
# ibv_access_flags bits (verbs.h), to say which access a registration asked for
_ACCESS_BITS = ((1, "LOCAL_WRITE"), (2, "REMOTE_WRITE"), (4, "REMOTE_READ"), (8, "REMOTE_ATOMIC"), (16, "MW_BIND"))
_ACCESS = re.compile(r"\baccess(?:_?[Ff]lags?)?\s*[:=]\s*(?P<v>0x[0-9a-fA-F]+|\d+)")
# a verbs send queue with no room for another work request (max_send_wr reached)
_SQ_FULL = re.compile(r"\bSQ (?:is )?full\b|\bsend queue (?:is )?full\b|\bsq_full\b", re.I)
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
_NATIVE_ASSERT = re.compile(
    r"Assertion failed: (?P<expr>.+?) \((?P<file>[\w./\\-]+\.(?:cpp|cc|cu|h|hpp)):(?P<ln>\d+)\)"
)
# a C++ constructor frame (``CacheTransceiver::CacheTransceiver(``): the object is being built
_CTOR = re.compile(r"\b(\w+)::\1\(")
# the dynamic loader finding a binary and its libraries of different builds
_UNDEF_SYM = re.compile(r"(?:symbol lookup error: (?P<obj>\S+?): )?undefined symbol: (?P<sym>[\w@.]+)")


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


def native_line(lineno: int, s: str, seen: set[str]) -> GenericFinding | None:
    """The general rule a native line ``s`` (its collector/log prefixes taken off) falls
    under, or None; ``seen`` keeps one finding per library, file and status."""
    R = rules()
    us = _UNDEF_SYM.search(s) if "undefined symbol" in s else None
    if us is not None:
        got = _undefined_symbol(us, lineno, s)
        if got is not None and got.id not in seen:
            seen.add(got.id)
            return got
        return None
    m = (
        (_REG.search(s) or _REG_BARE.search(s) or _REG_ERRNO.search(s))
        if ("egister" in s or "reg_mr" in s or "ibv_" in s)
        else None
    )
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
                return None
            if verbs:  # a verbs object (CQ, QP, PD ...) also pins memory: the same limit
                meaning = "locked-memory limit: " + call + " pins its queue memory, which counts against "
                meaning += "RLIMIT_MEMLOCK (ulimit -l, the container's memlock) like a registration does"
            acc = _ACCESS.search(s)
            if acc is not None and name == "EINVAL":
                bits = int(acc.group("v"), 0)
                asked = [n for b, n in _ACCESS_BITS if bits & b]
                meaning = (
                    f"the access asked for ({' | '.join(asked)}) includes one the NIC does not support"
                    + (" (REMOTE_ATOMIC: a NIC without atomic capability refuses it)" if bits & 8 else "")
                    + ", or "
                    + meaning
                )
            return GenericFinding(
                id=fid,
                title=(f"{call}() failed" if verbs else "memory registration for RDMA failed")
                + f" with {name} ({m.group('str') or name})",
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
            return None
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
        return GenericFinding(
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
        return None
    if "full" in s and _SQ_FULL.search(s):
        return GenericFinding(
            id="rdma-send-queue-full",
            title="RDMA send queue full: a transfer cannot be posted",
            engine=_engine_of_native(s) or "rdma",
            line=lineno,
            phase="serving",
            component="RDMA transfer (posting work requests)",
            text=s[:300],
            cause="The queue pair's send queue holds as many work requests as it may (its max_send_wr, the NIC's "
            "limit): transfers are posted faster than the NIC completes them (many requests transferring at "
            "once), so every further post fails until completions drain it.",
            checks=[
                "ibv_devinfo -v | grep max_qp_wr   # the NIC's queue depth",
                "how many transfers run at once (concurrency, chunk/page counts per request) when it starts",
            ],
            fix="Post fewer work requests at once (lower concurrency or batch more pages per request), spread "
            "them over more QPs or NICs; the depth itself is the NIC's limit.",
        )
    w = _WC.search(s) if ("cqe" in s or "ompletion" in s or "exceeded" in s or "error" in s or "Error" in s) else None
    if w:
        rows = R["wc_status"]
        no = w.group("no") or next((k for k, v in rows.items() if v[1].lower() == (w.group("str") or "").lower()), "")
        row = rows.get(no)
        if row:
            nic = re.search(r"local_nic: (\w+)", s)
            return GenericFinding(
                id=f"rdma-wc-{row[0][7:].lower().replace('_', '-')}",
                title=f"RDMA work completion failed: {row[1]} ({row[0]})",
                engine=_engine_of_native(s) or "rdma",
                line=lineno,
                phase="first-transfer",
                component="RDMA transfer (work completion)",
                text=s[:300],
                role="consequence" if no == "5" else "cause",
                cause=f"{row[0]} ({row[1]})" + (f" on local NIC {nic.group(1)}" if nic else "") + f": {row[2]}.",
                checks=[
                    "ibstat / ibv_devinfo: the port state and link of the local NIC named",
                    "ib_send_bw / ib_write_bw between that local NIC and the peer's NIC",
                    "show_gids on both hosts (RoCE: the GID index and its IP version)",
                ],
                fix="Take the failing NIC out of the device list (--disaggregation-ib-device / MC device "
                "names) or repair its path; pair only NICs that reach each other.",
            )
            return None
    if ("evice" in s or "RNIC" in s or "HCAs" in s) and _NODEV.search(s):
        return GenericFinding(
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
        return None
    if s.count(":") >= 4 and _FAILWORD.search(s):
        m6 = _IPV6.search(s)
        if m6 and m6.group("addr").count(":") >= 3:
            return GenericFinding(
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
                checks=["the host IP each side advertises (hostname -I; the local_hostname / bootstrap host settings)"],
                fix="Advertise an IPv4 address (or a resolvable host name) for the transfer engine, or a "
                "release that brackets IPv6 addresses.",
            )
            return None
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
            return None
        meaning, code = "", ""
        nx = _NIXL_ERR.search(text)
        if nx:
            code, meaning = nx.group(0), R["nixl_status"].get(nx.group(0), "")
        for k, (uname, umean) in R["ucx_status"].items():
            if k in text:
                code, meaning = uname, umean
                break
        if not code:
            no = errno_in(text)
            if no:
                code, meaning = R["os_errno"][no][0], R["os_errno"][no][1]
        step, ph = nixl_step(text) if c["engine"] == "nixl" else ("", "")
        comp = c["component"] + (f", {step}" if step else "")
        phase = ph or (c["phase"] if c["phase"] != "any" else "")
        key = f"{c['engine']}:{f}:{code}"
        if key in seen:
            return None
        seen.add(key)
        return GenericFinding(
            id="native-error-generic",
            title=f"{c['engine']} error in {comp}" + (f": {code}" if code else ""),
            engine=c["engine"],
            line=lineno,
            phase=phase,
            component=comp,
            text=s[:300],
            cause=f"{comp} reported: {text[:200]}" + (f" ({code}: {meaning})" if meaning else "") + ".",
            checks=[_question(c["engine"], comp)],
            fix="Check what the component needs (see the checks); kvcheck has no specific signature for this text.",
        )
    return None


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


_ERRNO_NO = re.compile(r"\[(?:Errno )?(?P<no>\d{1,3})\]|\(value: (?P<v>\d{1,3})\)|\berrno[ =:]+(?P<e>\d{1,3})\b")


def errno_in(text: str) -> str | None:
    """The errno (``generic.yaml`` ``os_errno``) a text reports: by number (``[111]``,
    ``[Errno 98]``, ``(value: 14)``, ``errno 110``) or by its strerror text."""
    table = rules()["os_errno"]
    m = _ERRNO_NO.search(text)
    if m is not None:
        no = m.group("no") or m.group("v") or m.group("e")
        if no in table:
            return no
    for t, no in rules()["os_errno_text"].items():
        if t in text:
            return str(no)
    return None


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
