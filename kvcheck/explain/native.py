"""General rules for native lines: what a C/C++ library printed.

- an error line of a native library (glog of NIXL's or Mooncake's C++ files, UCX's
  ``file.c:N UCX ERROR``): the library and the component from its source file, NIXL's API
  step from the function it names, and the meaning of the status it prints (``NIXL_ERR_*``,
  UCX status strings);
- errno of a memory registration (ENOMEM = locked-memory limit, EFAULT/EINVAL = GPU memory
  not registrable for RDMA, EPERM = privilege), RDMA work-completion statuses, a plugin
  whose shared library is missing, RDMA devices the process cannot see, a peer address
  that is an unbracketed IPv6 literal, an undefined symbol (two builds mixed);
- a UCX transport failing on what the node allows (``ucx_transport_line``).

Native crash stacks and C++ assertions are read in ``crashes.py``, the node's own command
outputs in ``nodestate.py``. Each yields a ``rulebase.GenericFinding``.
"""

from __future__ import annotations

import re

from kvcheck.explain.rulebase import GenericFinding, nixl_step, rules

_GLOG = re.compile(
    r"^\s*(?:(?P<lvl>[EF])(?:\d{4}|\d{8}) "
    r"\d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+|(?P<lvl2>[EF])\s+)?(?P<file>[\w]+\.(?:cpp|cc|h)):(?P<ln>\d+)\]? "
    r"+(?P<text>.*)"
)
_WC = re.compile(
    r"(?:cqe|completion|wc)\w* with (?:error|status)[ =:]*(?P<no>\d+)|\b(?P<str>transport retry counter "
    r"exceeded|local protection error|Work Request Flushed Error|remote access error|remote invalid request "
    r"error|RNR retry counter exceeded|local length error|local QP operation error)\b",
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
# libfabric's providers (``efa_mr_reg_impl(): Unable to register MR of N bytes: Bad address``)
_REG_MR = re.compile(
    r"(?P<call>fi_mr_reg\w*|efa_mr_reg\w*)?[^\n]*?[Uu]nable to register MR[^:\n]*:\s*(?P<str>Bad address|Invalid "
    r"argument|Cannot allocate memory|Operation not permitted)"
)
_LIBFABRIC_LOG = re.compile(r"^libfabric:.*?:(?P<prov>\w+):(?P<sub>\w+):(?P<func>\w+)\(\):\d+<(?P<lvl>\w+)>")
_SO = re.compile(r"(?P<obj>[\w.+-]+\.so)\S*: (?P<lib>lib[\w.+-]+?\.so[\d.]*): cannot open shared object file")
_NODEV = re.compile(
    r"No IB devices found|ibv_get_device_list failed|Device path /dev/infiniband/\S+ does not exist|No available "
    r"RNIC|No RDMA devices? (?:found|available)|Found 0 HCAs|no RDMA device"
)
_IPV6 = re.compile(r"(?<![\[\w:])(?P<addr>(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}):(?P<port>\d{2,5})\b(?!\])", re.I)
_FAILWORD = re.compile(r"fail|unable|cannot|could not|error", re.I)
# the dynamic loader finding a binary and its libraries of different builds
_UNDEF_SYM = re.compile(r"(?:symbol lookup error: (?P<obj>\S+?): )?undefined symbol: (?P<sym>[\w@.]+)")


_CODE_WORD = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]{3,}\b")


def status_meaning(text: str) -> tuple[str, str]:
    """(code, meaning) of the status a message carries: a NIXL status, a UCX status
    string, a code a project documents (Mooncake's ``ErrorCode`` / ``ERR_*``, from its
    source: ``engine_formats.json.gz`` ``codes``), an errno (``generic.yaml``); or ('', '')."""
    R = rules()
    nx = _NIXL_ERR.search(text)
    if nx:
        return nx.group(0), R["nixl_status"].get(nx.group(0), "")
    for k, (uname, umean) in R["ucx_status"].items():
        if k in text:
            return uname, umean
    if "_" in text:
        from kvcheck.explain.formats import load_engine_formats

        for w in _CODE_WORD.findall(text):
            for name, idx in load_engine_formats().items():
                row = idx.codes.get(w)
                if row and row[1]:
                    note = R["code_notes"].get(w, "")
                    return w, f"{row[1].rstrip('.')} ({name}'s {w} = {row[0]})" + (f": {note}" if note else "")
    if "End of file" in text:  # asio/stream EOF (its ``value: 2`` is no errno)
        return "EOF", (
            "the peer closed the connection: its process went away, or the connection reached another process "
            "than the one meant (a port reused by a restarted process, or two processes given the same port)"
        )
    no = errno_in(text)
    if no:
        return R["os_errno"][no][0], R["os_errno"][no][1]
    return "", ""


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
        (_REG.search(s) or _REG_BARE.search(s) or _REG_ERRNO.search(s) or _REG_MR.search(s))
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
            verbs = bool(call) and not call.endswith("reg_mr") and "reg_" not in call and "mr_reg" not in call
            lf = _LIBFABRIC_LOG.match(s.strip())
            if lf is not None and not call:
                call = f"libfabric {lf.group('prov')} {lf.group('func')}()"
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
                    "Enable GPUDirect RDMA (the peer-memory module, nvidia_peermem / amdgpu_peermem, or a "
                    "dma-buf registration) or register host memory; do not use "
                    "expandable_segments for the KV pool.",
                ),
            )
            return None
    m = _SO.search(s) if "shared object" in s else None
    if m:
        lib = m.group("lib")
        if re.match(r"lib(?:plugin_|nixl)", lib):  # another of NIXL's own libraries (its plugin directory)
            return GenericFinding(
                id="nixl-plugin-dependency-not-found",
                title=f"{m.group('obj')} cannot load: NIXL's own {lib} not found",
                engine="nixl",
                line=lineno,
                phase="startup",
                component="NIXL plugin loading",
                text=s[:300],
                cause=f"The plugin {m.group('obj')} links another of NIXL's own libraries, {lib}, which sits in "
                "NIXL's plugin directory; the loader finds it only when that directory is on its search path: "
                "NIXL builds before 0.5.0 gave the plugins no rpath to their own directory (fixed by nixl PR "
                "#612), so the plugin fails to load unless LD_LIBRARY_PATH (or NIXL_PLUGIN_DIR) names it.",
                checks=[
                    f"ldd <plugin dir>/{m.group('obj')} | grep 'not found'",
                    "pip show nixl | grep Version; the plugin directory (.nixl.mesonpy.libs/plugins in the wheel)",
                ],
                fix="Upgrade NIXL to 0.5.0 or later, or add NIXL's plugin directory to LD_LIBRARY_PATH (and set "
                "NIXL_PLUGIN_DIR to it).",
            )
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
            mooncake = _engine_of_native(s) == "mooncake"
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
                ]
                + (
                    # Mooncake sets each QP's path MTU from its own port only (RdmaEndPoint::doSetupConnection,
                    # v0.3.12; Mooncake#3868): two ports of different active MTU fail so
                    [
                        "ibv_devinfo | grep active_mtu on both hosts and MC_MTU on both sides (Mooncake does not "
                        "negotiate the path MTU with the peer, Mooncake#3868: MC_MTU set to the smaller on both)"
                    ]
                    if mooncake and no in ("1", "4", "9", "12")
                    else []
                ),
                fix=(
                    "Take the failing NIC out of Mooncake's device list (the device names its transfer engine is "
                    "initialized with) or repair its path; pair only NICs that reach each other."
                    if mooncake
                    else "Take the failing NIC out of the transfer engine's device list (SGLang: "
                    "--disaggregation-ib-device) or repair its path; pair only NICs that reach each other."
                ),
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
            c = _MOONCAKE_ONLY if g is not None and _mooncake_file(f) else None
            if c is None:
                return None
        code, meaning = status_meaning(text)
        if c["engine"] == "mooncake":
            key = f"mooncake:{f}:{code}"
            if key in seen:
                return None
            seen.add(key)
            from kvcheck.explain.mooncake_native import explain as mooncake_explain

            mc = mooncake_explain(lineno, s, text, None, f, f"{code}: {meaning}" if meaning else "")
            if mc is not None:
                return mc
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


# a glog file no ``components`` row names that is one of Mooncake's (``mooncake_native.place``)
_MOONCAKE_ONLY = {"engine": "mooncake", "component": "Mooncake", "phase": "any"}


def _mooncake_file(f: str) -> bool:
    """Whether ``f`` is a file name of Mooncake's source (its format index's files), not one
    of NIXL's, that one of ``mooncake_native``'s components places."""
    from kvcheck.explain.formats import load_engine_formats
    from kvcheck.explain.mooncake_native import place

    idx = load_engine_formats()
    # a name NIXL's source has too (config.cpp, transport.cpp ...) does not say which of the two printed it
    return f in idx["mooncake"].files and f not in idx["nixl"].files and place(f) is not None


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
    if s.lstrip().startswith("libfabric:") or "fi_mr_reg" in s:
        return "libfabric"
    if "nixl" in s.lower():
        return "nixl"
    if "mooncake" in s.lower() or "transfer_engine" in s:
        return "mooncake"
    return ""


def _question(engine: str, comp: str) -> str:
    if engine == "mooncake":
        return (
            "ibv_devices / show_gids on both hosts; the transfer engine's device list (SGLang: "
            "--disaggregation-ib-device) vs. the NICs that reach "
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


# words one of the ``ucx_transport`` rules needs (the per-line prefilter)
_TRANSPORT_HINTS = ("process_vm", "cma", "attach", "/proc/", "shm", "sysv", "QP", "qp", "ipc mem handle", "posix")


def ucx_transport_line(lineno: int, s: str, seen: set[str]) -> GenericFinding | None:
    """A UCX transport failing on what the node allows (``generic.yaml`` ``ucx_transport``:
    CMA without ptrace, posix attach across namespaces, /dev/shm or SysV limits, QPs
    exhausted, a CUDA IPC handle already open), once per rule."""
    if not any(h in s for h in _TRANSPORT_HINTS):
        return None
    for rx, need, t in rules()["_ucx_transport"]:
        if t["id"] in seen or rx.search(s) is None or need.search(s) is None:
            continue
        seen.add(t["id"])
        return GenericFinding(
            id=t["id"],
            title=t["title"],
            engine="ucx",
            line=lineno,
            phase=t["phase"],
            component=t["component"],
            text=s.strip()[:300],
            cause=t["cause"] + f" The line: {s.strip()[:160]}",
            checks=list(t["checks"]),
            fix=t["fix"],
        )
    return None
