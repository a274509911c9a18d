"""General rules for Python exceptions: a traceback, or an exception line pasted alone.

What every such line still carries, from documented meanings only (``generic.yaml``):
the exception type (code mismatch, lookup of a state that is gone, a broken invariant, a
refusal with its message, network, GPU), the innermost frame of the engine's own code
(SGLang: the module under ``sglang/srt/`` and its function, mapped to the subsystem), and
from the functions on the stack the phase (an ``__init__``/registration at start-up, a
bootstrap at the first request, a transfer worker on a KV transfer). A NIXL status names
its API step; an import that fails names the package (missing, a broken install, a wheel
for another CUDA major); an API called with arguments it does not take names the two
packages of releases that do not go together.
"""

from __future__ import annotations

import re

from kvcheck.explain.formats import FormatMatch, load_formats, phase_of_function
from kvcheck.explain.native import _NIXL_ERR, errno_in
from kvcheck.explain.rulebase import GenericFinding, engine_of_module, nixl_step, rules, sglang_subsystem

_EXC = re.compile(
    r"^(?P<qual>(?:[\w]+\.)*)(?P<type>[A-Za-z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(?P<msg>.*))?$"
)
_NIXL_EXC = re.compile(r"\bnixl(?P<name>[A-Z]\w*)Error\b")
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
    r"does not support|not supported|unsupported|please (?:use|set)|must (?:explicitly )?(?:be|provide|set|use)"
    r"|is not compatible|incompatible",
    re.I,
)
# the advice a refusal message gives ("..., please use trtllm on blackwell")
_S = r"(?:[^.;]|\.(?!\s|$))"  # a sentence's character: a dot inside it (e.g., 0.5.10) does not end it
_ADVICE = re.compile(
    r"\b(?:[Pp]lease|[Tt]ry|[Cc]onsider) " + _S + r"{4,240}|(?<=[,;:] )(?:use|set|pass|add) " + _S + r"{4,240}"
    r"|\b[Yy]ou (?:must|need to|should) (?:explicitly )?(?:provide|set|use|pass|specify|add|enable|disable) "
    + _S
    + r"{3,240}"
)
# the flags a message names (``--page-size``, ``--disaggregation-ib-device``)
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+|(?<![\w-])--[a-z]{2,}\b")
# an errno as Python prints it (``[Errno 98] Address already in use``)
_ERRNO = re.compile(r"\[Errno (?P<no>\d+)\]")
# exception kinds whose message the interpreter or the OS writes, not the code: their text
# is in no release's source whoever raised them
_RUNTIME_WORDED = {"code", "state", "network", "gpu"}
# a C++ assertion as TRT-LLM, NIXL and others print it, with its source file
# a shared library a module needs is not on the host (``ImportError: libcudart.so.12: cannot open ...``)
_LIB_MISSING = re.compile(r"(?P<lib>lib[\w+-]+?\.so(?:\.(?P<major>\d+))?[\d.]*): cannot open shared object file")
# the statement that imported it (the source line under a frame, or a REPL line)
_IMPORT_STMT = re.compile(r"^\s*(?:>>>\s*)?(?:from\s+(?P<a>[\w.]+)\s+import\b|import\s+(?P<b>[\w.]+))")
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


def traceback_finding(
    frames: list[tuple[str, str, str]],
    tb_line: int,
    lineno: int,
    ex: re.Match[str] | None,
    src: str,
    last_import: str = "",
    recent_call: str = "",
    sglang_ok: bool = True,
) -> GenericFinding | None:
    """The general finding of a traceback (``frames``: (path, line, function), outermost
    first; ``ex``: its ``Type: message`` line matched by ``_EXC``; ``src``: the source line
    shown under the innermost frame; ``last_import``: the module the last import statement
    before it named; ``recent_call``: a NIXL API call a line shortly before showed;
    ``sglang_ok``: False when another engine wrote its lines, so never read as SGLang's),
    located at lines ``tb_line``..``lineno``."""
    R = rules()
    etype = ex.group("type") if ex else ""
    msg = (ex.group("msg") or "").strip() if ex else ""
    own = [f for f in frames if engine_of_module(f[0]) not in ("", "nixl")] or frames or [("", "", "")]
    path, ln, func = own[-1]
    engine = engine_of_module(path) or ("python" if path else "")
    sub = sglang_subsystem(path) if engine == "sglang" else ""
    where = f"{re.split(r'(?:site|dist)-packages/|/python/', path)[-1]}:{ln} in {func}" if path else "(no frame shown)"
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
    # the message as SGLang formats it in its own source, release by release
    fm = sglang_format(etype, msg) if sglang_ok and etype and msg and kind not in _RUNTIME_WORDED else None
    fmt_note = ""
    if fm is not None and (not path or engine == "sglang"):
        span = fm.span(load_formats().releases)
        if not path:
            engine, sub, where = "sglang", sglang_subsystem(fm.path()), fm.where()
            fmt_note = f"the message is SGLang's, in releases {span}"
        else:
            fmt_note = f"SGLang raises it in {fm.where()} (the message is in releases {span})"
        phase = phase or phase_of_function(fm.function, fm.module)
    elif sglang_ok and etype and msg and not path and kind not in _RUNTIME_WORDED and len(msg.split()) >= 3:
        fmt_note = (
            f"no SGLang release ({load_formats().releases[0]} .. {load_formats().releases[-1]}) formats this "
            "message in its source: it is not SGLang's own text (a wrapper such as Dynamo, a connector or a "
            "library raised it)"
        )
    if not phase and not frames and kind == "refusal" and _CONFIG_REFUSAL.search(msg):
        phase = "startup"  # a configuration refused, pasted alone: raised while the engine is built
    eno = _errno(msg) if etype else None
    if eno is not None:
        return _errno_finding(eno, etype, msg, engine, where, phase, tb_line, lineno, ex.group(0) if ex else "")
    lm = _LIB_MISSING.search(msg) if etype in ("ImportError", "OSError") else None
    if lm is not None:
        ims = _IMPORT_STMT.match(src)
        mod = (ims.group("a") or ims.group("b") or "") if ims else ""
        mod = mod or last_import or next((e for e in (engine_of_module(f[0]) for f in reversed(frames)) if e), "")
        return _library_missing(lm, mod, engine, where, tb_line, lineno, ex.group(0) if ex else "")
    nm = _NO_MODULE.search(msg) if etype in ("ModuleNotFoundError", "ImportError") else None
    if nm is not None:
        return _module_missing(nm.group("mod"), engine, where, tb_line, lineno, ex.group(0) if ex else "")
    nixl = _NIXL_ERR.search(msg) or (_NIXL_EXC.search(ex.group(0)) if ex else None)
    if nixl is not None:
        code = nixl.group(0) if nixl.group(0).startswith("NIXL_ERR") else _nixl_code(nixl.group("name"))
        step, ph = nixl_step(" ".join(funcs))
        if not step and recent_call:
            step, ph = nixl_step(recent_call)
        return _nixl_status(code, step, ph or phase, where, tb_line, lineno, ex.group(0) if ex else "")
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
    head = f"{etype}: {msg}"[:300] if etype else "traceback without its exception line"
    mm = _API_MISMATCH.match(msg) if etype == "TypeError" else None
    callee = _callee_engine(mm.group("callee"), path) if mm else ""
    if mm and callee and callee != engine:
        arg = mm.group("arg") or ""
        who = engine or "the caller (its frames are not shown)"
        return GenericFinding(
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
    if engine == "sglang":
        comp = f"SGLang, {sub}" if sub else "SGLang"
    else:
        comp = engine or "an unnamed package (no frame shown)"
    flags = list(dict.fromkeys(_FLAG.findall(msg)))
    if fm is not None and kind == "refusal" and (fm.module.endswith("server_args") or ".arg_groups." in fm.module):
        what = "the server refuses its own arguments at start-up: the message says which and why"
    checks = (
        [
            f"the release: pip show {'sglang' if engine == 'sglang' else engine}; the line numbers ({where}) "
            "against that release's source"
        ]
        if engine and engine != "python"
        else ["the full traceback (its frames name the package that raised it) and that package's release"]
    )
    if kind == "code":
        checks.append(
            f"the release notes / issues of {engine or 'the package'} for {func or etype} and {etype}: a later "
            f"release may fix it; the flags that reach {sub or func or 'it'}"
        )
    elif kind == "state":
        checks.append(
            "what removed it first: an earlier error, a timeout, an abort, or the peer restarting (read the "
            "lines before)"
        )
    elif not etype:
        checks.insert(0, "the traceback's last line (Type: message), which the paste does not show")
    if fm is None and fmt_note:
        checks.insert(0, "which process printed it (the wrapper's or connector's own log and release)")
    advice = _ADVICE.search(msg)
    if kind == "code":
        fix = (
            "Upgrade to a release that fixes it, or avoid the flag that reaches it; report it with the traceback "
            "and the release."
        )
    elif advice is not None:
        fix = f"What the message itself asks: {advice.group(0).rstrip('.')}."
    else:
        fix = "Find and fix what the exception reports (see the checks)."
    if flags and kind == "refusal":
        fix += f" The flags it names: {', '.join(flags)}."
    releases = fm.releases if fm is not None and engine == "sglang" else []
    if engine == "sglang":
        title = f"SGLang {'traceback' if frames else 'exception'}: {head}"
    elif engine:
        title = f"{engine} {'traceback' if frames else 'exception'}: {head}"
    else:
        title = f"exception (not SGLang's text): {head}" if fmt_note else f"Python exception: {head}"
    return GenericFinding(
        id="python-exception-generic",
        title=title,
        engine=engine,
        line=tb_line,
        phase=phase,
        component=comp,
        text=ex.group(0)[:300] if ex else "",
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=f"{head} at {where}"
        + (f" ({sub})" if sub else "")
        + f": {what}."
        + (f" {fmt_note[:1].upper()}{fmt_note[1:]}." if fmt_note else ""),
        checks=checks,
        fix=fix,
        releases=releases,
    )


def sglang_log_finding(fm: FormatMatch, lineno: int, line: str) -> GenericFinding:
    """A line SGLang logged at error level (``logger.error``/``exception``), matched whole
    by its format: where SGLang logs it, in which releases, and the phase its function
    runs in; the message says what failed."""
    span = fm.span(load_formats().releases)
    sub = sglang_subsystem(fm.path())
    return GenericFinding(
        id="sglang-error-log-generic",
        title=f"SGLang logged: {fm.text[:160]}",
        engine="sglang",
        line=lineno,
        phase=phase_of_function(fm.function, fm.module),
        component=f"SGLang, {sub}" if sub else "SGLang",
        text=line.strip()[:300],
        cause=f"SGLang logs this at {fm.kind[4:]} level in {fm.where()} (the message is in releases {span}): "
        "what it names failed there; the lines before it say why.",
        checks=["the lines just before it in the same process (the first error of the sequence)"],
        fix="Find and fix what the message names (see the checks).",
        releases=fm.releases,
    )


def nixl_status_finding(line: str, lineno: int, recent_call: str) -> GenericFinding | None:
    """A NIXL status printed outside a traceback (``error: NIXL_ERR_BACKEND``) with the NIXL
    call a line shortly before showed: the status's meaning in that API step."""
    nixl = _NIXL_ERR.search(line)
    step, ph = nixl_step(recent_call)
    if nixl is None or not step:
        return None
    return _nixl_status(nixl.group(0), step, ph, f"the call {recent_call[:120]}", lineno, lineno, line.strip())


# what a NIXL status means in each API step (the operation the backend failed)
_STEP_CAUSE = {
    "metadata exchange with the peer agent": "loading the peer agent's metadata makes the backend connect to "
    "the peer's addresses: it failed to reach or accept them (the network between the two nodes, "
    "UCX_NET_DEVICES / UCX_TLS excluding the path the peer advertises, or two NIXL/UCX builds that disagree)",
    "memory registration of the KV regions": "the backend could not register the memory: for VRAM, UCX "
    "without its CUDA transports (cuda_copy) or no GPUDirect RDMA; for DRAM, the locked-memory limit",
    "backend creation (plugins, UCX context)": "the backend could not start: its plugin or UCX library is "
    "missing or of another build, or UCX has no transport it may use",
    "preparing/posting a transfer": "the transfer was refused when posted: descriptors of unregistered "
    "memory, or a peer whose metadata is stale or gone",
    "a transfer's completion": "a posted transfer failed on the wire: the peer vanished or the path dropped",
    "notifications between agents": "the notification could not reach the peer agent (it is gone or unreachable)",
}


def _nixl_status(code: str, step: str, phase: str, where: str, tb_line: int, lineno: int, text: str) -> GenericFinding:
    meaning = rules()["nixl_status"].get(code, "")
    in_step = _STEP_CAUSE.get(step, "") if code in ("NIXL_ERR_BACKEND", "NIXL_ERR_UNKNOWN") else ""
    return GenericFinding(
        id="nixl-status-generic",
        title=f"{code} from NIXL" + (f" during {step}" if step else ""),
        engine="nixl",
        line=tb_line,
        phase=phase,
        component=f"NIXL ({step})" if step else "NIXL",
        text=text[:300],
        cause=f"{code}: {meaning}. Raised at {where}." + (f" In {step}: {in_step}." if in_step else ""),
        checks=[
            "the backend's own error line just before it (UCX/LIBFABRIC: UCX_LOG_LEVEL=info)",
            "python -c 'import nixl_cu12, nixl_cu13' and pip list | grep -i nixl (one NIXL, matching CUDA)",
        ]
        + (
            ["ping / nc from this node to the peer's address; UCX_NET_DEVICES and UCX_TLS on both sides"]
            if step.startswith("metadata")
            else []
        ),
        fix=(
            f"Fix what {step} needs (see the checks); the backend line before it names the cause."
            if step
            else "Explain the backend line that precedes it; it names the cause NIXL reports as " + code + "."
        ),
        lines=[tb_line, lineno],
    )


def sglang_format(etype: str, msg: str) -> FormatMatch | None:
    """The SGLang message format an exception's message is, or None: its raise or assert
    must be of the same type, or the format must carry 30+ characters of literal text (a
    message re-raised under another type, or logged)."""
    fm = load_formats().match(msg)
    if fm is None:
        return None
    t = fm.exception_type
    if t == etype or fm.literal >= 30 or (etype == "AssertionError" and fm.kind == "assert"):
        return fm
    return None


def _errno(msg: str) -> str | None:
    return errno_in(msg)


# an error log line (any engine's format) that reports an OS error in its text
_ERROR_LINE = re.compile(r"\bERROR\b|\b[Ee]xception\b|\b[Ff]ailed\b|\bError\b|Error\(|Error:")


def errno_line_finding(lineno: int, line: str) -> GenericFinding | None:
    """An OS error reported inside an error log line, outside a traceback (``ERROR ...
    [mooncake_connector.py:246] ... exception: Address already in use (addr=...)``)."""
    if not _ERROR_LINE.search(line):
        return None
    no = errno_in(line)
    if no is None:
        return None
    text = line.strip()
    m = re.search(r"(?:exception|Error|error|failed)[:,]?\s*(?P<msg>.+)$", text)
    msg = m.group("msg") if m else text
    return _errno_finding(no, "error", msg, "", "this line", "", lineno, lineno, text)


def _errno_finding(
    no: str, etype: str, msg: str, engine: str, where: str, phase: str, tb_line: int, lineno: int, text: str
) -> GenericFinding:
    """An OS error by its errno: what the call met (a port taken, nobody listening, no
    route ...), from ``generic.yaml`` (``os_errno``)."""
    name, meaning, look = rules()["os_errno"][no]
    bind = name == "EADDRINUSE"
    return GenericFinding(
        id=f"os-{name.lower()}",
        title=f"{etype}: {msg[:120]} ({name})",
        engine=engine or "python",
        line=tb_line,
        phase=phase or ("startup" if bind else ""),
        component="sockets / the OS" if name not in ("ENOSPC", "ENOENT", "EMFILE") else "the OS",
        text=text[:300],
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=f"{etype}: {msg[:200]} at {where}: {name} — {meaning}.",
        checks=[look],
        fix=(
            "Give each server on the host its own ports (--port, --disaggregation-bootstrap-port, "
            "--dist-init-addr/--nccl-port), or stop the process that holds it."
            if bind
            else "Fix what the OS reports (see the checks); retrying does not help until it is fixed."
        ),
    )


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
    return _env_finding(
        fid,
        f"import of {mod or 'a module'} fails: {lib} missing",
        engine if engine not in ("", "python") else (top or "python"),
        "shared libraries of an installed package",
        (tb_line, lineno, text),
        cause,
        [
            f"python -m pip show {pkg or '<package>'}  # which build (cu12 / cu13) is installed",
            "nvidia-smi; ls /usr/local/cuda*/lib64/libcudart.so*  # the CUDA the image has",
        ],
        fix,
    )


# symbol prefixes -> the library family that exports them


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
    return _env_finding(
        fid,
        f"module {mod} not found: {pkg} " + ("install broken" if sub else "not installed"),
        engine or "python",
        "Python environment (installed packages)",
        (tb_line, lineno, text),
        cause,
        [f"python -c 'import {mod}' with the server's interpreter", f"python -m pip show {pkg}; which python"],
        fix,
    )


def _env_finding(
    fid: str, title: str, engine: str, component: str, at: tuple[int, int, str], cause: str, checks: list[str], fix: str
) -> GenericFinding:
    """A start-up finding about the Python environment (a package or library missing or
    of another build), at (traceback line, exception line, its text)."""
    tb_line, lineno, text = at
    return GenericFinding(
        id=fid,
        title=title,
        engine=engine,
        line=tb_line,
        phase="startup",
        component=component,
        text=text[:300],
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=cause,
        checks=checks,
        fix=fix,
    )


def _nixl_code(name: str) -> str:
    return "NIXL_ERR_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper().replace("CANCELLED", "CANCELED")
