"""Findings of error log lines (outside a traceback) and those shared with tracebacks.

- a line SGLang logs at error level, matched whole by its format (where, which releases,
  the phase of its function);
- a line another project (vLLM, NIXL, UCX, Mooncake ...) prints at error or warning level,
  matched whole by a format of its own source;
- a line of a known message class (``generic.yaml`` ``message_classes``);
- a NIXL status in the API step of the NIXL call shown before it;
- an OS error (errno) reported inside an error line;
- a message whose meaning its project states (``generic.yaml`` ``known_messages``), matched
  whole by its format.
"""

from __future__ import annotations

import re

from kvcheck.explain.formats import _SRC_FILE, FormatMatch, load_formats, phase_of_function
from kvcheck.explain.native import _NIXL_ERR, errno_in, status_meaning
from kvcheck.explain.rulebase import GenericFinding, nixl_step, rules, sglang_subsystem


def sglang_log_finding(fm: FormatMatch, lineno: int, line: str) -> GenericFinding:
    """A line SGLang logged at error level (``logger.error``/``exception``), matched whole
    by its format: where SGLang logs it, in which releases, and the phase its function
    runs in; the message says what failed."""
    span = fm.span(load_formats().releases)
    sub = sglang_subsystem(fm.path())
    cls = message_class(fm.text)
    if cls is not None:
        return GenericFinding(
            id=cls["id"],
            title=cls["title"],
            engine="sglang",
            line=lineno,
            phase=cls.get("phase") or phase_of_function(fm.function, fm.module),
            component=f"SGLang, {sub}" if sub else "SGLang",
            text=line.strip()[:300],
            cause=cls["cause"] + f" SGLang logs it in {fm.where()} (releases {span}).",
            checks=["the router/proxy in front of the servers and the path it sends this request by"],
            fix=cls["fix"],
            releases=fm.releases,
        )
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


# an environment variable's name (a setting a message prints as its value)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*_[A-Z0-9_]+$")

# what kvcheck says for each project's own messages (it models SGLang's PD path only)
_PROJECT = {
    "vllm": ("vLLM", "vLLM's own message (kvcheck does not model vLLM's KV connectors; it is not SGLang's)"),
    "vllm-ascend": ("vLLM-Ascend", "vLLM-Ascend's own message (kvcheck does not model vLLM-Ascend; not SGLang's)"),
    "lmcache": ("LMCache", "LMCache's own message (kvcheck does not model LMCache; not SGLang's)"),
    "dynamo": ("Dynamo", "Dynamo's own message (its Python workers; kvcheck does not model Dynamo; not SGLang's)"),
    "nixl": ("NIXL", "NIXL's own message"),
    "ucx": ("UCX", "UCX's own message"),
    "mooncake": ("Mooncake", "Mooncake's own message"),
}


def class_line_finding(lineno: int, line: str, engine: str) -> GenericFinding | None:
    """A line no format matched whose text is of a known class (``message_classes``): a
    message pasted inside another (an HTTP error body, a wrapper's log line)."""
    cls = message_class(line)
    if cls is None:
        return None
    name = _PROJECT.get(engine, (engine, ""))[0] if engine else ""
    return GenericFinding(
        id=cls["id"],
        title=cls["title"],
        engine=engine or "python",
        line=lineno,
        phase=cls.get("phase", ""),
        component=name or "the process",
        text=line.strip()[:300],
        cause=cls["cause"] + f" The line: {line.strip()[:160]}",
        checks=["which process printed it and its release"],
        fix=cls["fix"],
    )


def message_class(text: str) -> dict | None:
    """The class of message ``text`` is (``generic.yaml`` ``message_classes``), or None."""
    return next((c for rx, c in rules()["_message_classes"] if rx.search(text)), None)


def engine_log_finding(fm: FormatMatch, lineno: int, line: str, warning: bool = False) -> GenericFinding:
    """A line another project (vLLM, NIXL, UCX, Mooncake) prints at error level, matched
    whole by a format of that project's own source (``engine_formats.json.gz``): whose it
    is, the file and function that print it, the project's releases that have it, the
    step the function belongs to (NIXL's API steps, Mooncake's and UCX's components by
    file), and what a status, UCX status string or errno in it means."""
    from kvcheck.explain.formats import load_engine_formats

    name, whose_text = _PROJECT.get(fm.engine, (fm.engine, f"{fm.engine}'s own message"))
    span = fm.span(load_engine_formats()[fm.engine].releases)
    base = fm.module.rsplit("/", 1)[-1]
    comp, phase = "", ""
    for rx, c in rules()["_components"]:
        if rx.match(base):
            comp, phase = c["component"], (c["phase"] if c["phase"] != "any" else "")
            break
    step, ph = nixl_step(fm.function + " " + fm.text) if fm.engine == "nixl" else ("", "")
    if step:
        comp, phase = (comp + ", " if comp else "NIXL, ") + step, ph
    if not phase:
        phase = phase_of_function(fm.function.replace("::", "."))
    code, meaning = status_meaning(fm.text)
    level = "raises" if fm.kind.startswith(("raise", "assert")) else f"logs at {fm.level} level"
    own = _SRC_FILE.search(line)
    other_file = own is not None and not fm.same_file and own.group(1) != fm.module.rsplit("/", 1)[-1]
    # the settings the message prints (an environment variable passed as its value)
    knobs = [f"{k}={v}" if v else k for k, v in fm.values.items() if _ENV_NAME.match(k)]
    cause = (
        f"{whose_text}: "
        + (f"{own.group(1)} prints the message {name} " if other_file and own else f"{name} ")
        + f"{level} in {fm.where()}"
        + (f" ({comp})" if comp else "")
        + f"; the message is in {name} releases {span}."
        + (f" The setting it prints: {', '.join(knobs)}." if knobs else "")
    )
    cls = message_class(fm.text)
    if cls is not None:
        return GenericFinding(
            id=cls["id"],
            title=cls["title"],
            engine=fm.engine,
            line=lineno,
            phase=cls.get("phase") or phase,
            component=comp or f"{name}, {fm.where()}",
            text=line.strip()[:300],
            cause=cls["cause"] + " " + cause,
            checks=[f"the {name} release in use and its release notes for this message"],
            fix=cls["fix"],
        )
    meant = f" {code}: {meaning}." if meaning else ""
    if warning:
        return GenericFinding(
            id=f"{fm.engine}-warning-log-generic",
            title=f"{name} warned: {fm.text[:160]}",
            engine=fm.engine,
            line=lineno,
            phase=phase,
            component=comp or f"{name}, {fm.where()}",
            text=line.strip()[:300],
            role="warning",
            cause=cause + meant + " A warning: the cause only where the log shows no error.",
            checks=[f"whether what it warns about is what failed (the {name} release in use)"],
            fix=f"Act on what the warning names where nothing else failed (see {fm.where()}).",
        )
    return GenericFinding(
        id=f"{fm.engine}-error-log-generic",
        title=f"{name} logged: {fm.text[:160]}",
        engine=fm.engine,
        line=lineno,
        phase=phase,
        component=comp or f"{name}, {fm.where()}",
        text=line.strip()[:300],
        cause=cause + (meant or " What it names failed there; the lines before it say why."),
        checks=[
            f"the {name} release in use (it decides which of the releases above printed it)",
            "the lines just before it (the first error of the sequence)",
        ],
        fix=f"Fix what the message names in {name}'s terms (see the checks); kvcheck has no specific signature "
        "for this text.",
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


# an error log line (any engine's format) that reports an OS error in its text
_ERROR_LINE = re.compile(r"\bERROR\b|\b[Ee]xception\b|\b[Ff]ailed\b|\bError\b|Error\(|Error:|\b[Ee]rror: \(-?\d+\)")


def errno_line_finding(lineno: int, line: str, engine: str = "") -> GenericFinding | None:
    """An OS error reported inside an error log line, outside a traceback (``ERROR ...
    [mooncake_connector.py:246] ... exception: Address already in use (addr=...)``);
    ``engine``: the engine whose format the line is in ("" when not shown)."""
    if not _ERROR_LINE.search(line):
        return None
    no = errno_in(line)
    if no is None:
        return None
    text = line.strip()
    m = re.search(r"(?:exception|Error|error|failed)[:,]?\s*(?P<msg>.+)$", text)
    msg = m.group("msg") if m else text
    return _errno_finding(no, "error", msg, engine, "this line", "", lineno, lineno, text)


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
        fix=_bind_fix(engine) if bind else _OS_FIX,
    )


_OS_FIX = "Fix what the OS reports (see the checks); retrying does not help until it is fixed."
_SGLANG_PORTS = "--port, --disaggregation-bootstrap-port, --dist-init-addr/--nccl-port"


def _bind_fix(engine: str) -> str:
    """The fix for a port already taken, in the words of the process that binds it: SGLang's
    port flags for an SGLang line, for a line whose process is not shown as well (naming
    them as SGLang's), none for another engine's line (vLLM, Mooncake ...: their own
    settings choose their ports, never SGLang's flags)."""
    if engine == "sglang":
        return f"Give each server on the host its own ports ({_SGLANG_PORTS}), or stop the process that holds it."
    if engine in ("", "python"):
        return (
            "Give each process on the host its own port (for an SGLang server: "
            f"{_SGLANG_PORTS}), or stop the process that holds it."
        )
    from kvcheck.explain.lines import ENGINE_NAMES

    return (
        f"Give each process on the host its own port ({ENGINE_NAMES.get(engine, engine)}'s own port settings "
        "choose the one the message names), or stop the process that holds it."
    )


def _nixl_code(name: str) -> str:
    return "NIXL_ERR_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper().replace("CANCELLED", "CANCELED")


_FIELD = re.compile(r"\{(\d)\}")
_EMPTY_PAREN = re.compile(r" \((?:[\w ]+: )?\{(\d)\}\)")


def _arg(args: list[str], i: int) -> str:
    return args[i].strip()[:160] if i < len(args) else ""


def known_message_finding(fm: FormatMatch, lineno: int, line: str) -> GenericFinding | None:
    """The cause a project's message states (``generic.yaml`` ``known_messages``), when the
    line is that message WHOLE: ``fm``'s format (its literal text with fields, as the
    project's source writes it) is the table's, and each field ``when`` names has a value
    its pattern matches; None otherwise. ``{N}`` in the texts: field N's value. The
    finding says where the project prints it and in which of its releases."""
    rows = rules()["_known_messages"].get((fm.engine, fm.fmt)) if fm.fmt else None
    if not rows:
        return None
    args = fm.args
    for when, k in rows:
        if any(i >= len(args) or rx.search(args[i].strip()) is None for i, rx in when.items()):
            continue

        def fill(t: str) -> str:
            # a field the paste does not show (cut, or on the next line): its parenthesis goes
            t = _EMPTY_PAREN.sub(lambda m: "" if not _arg(args, int(m.group(1))) else m.group(0), t)
            return _FIELD.sub(lambda m: _arg(args, int(m.group(1))), t)

        if fm.engine == "sglang":
            span = fm.span(load_formats().releases)
        else:
            from kvcheck.explain.formats import load_engine_formats

            span = fm.span(load_engine_formats()[fm.engine].releases)
        return GenericFinding(
            id=k["id"],
            title=fill(k["title"]),
            engine=fm.engine,
            line=lineno,
            phase=k.get("phase", ""),  # '' = the log's timeline decides
            component=k["component"],
            text=line.strip()[:300],
            cause=fill(k["cause"]) + f" {fm.engine_name} prints it in {fm.where()} (its releases {span}).",
            checks=list(k.get("checks") or []),
            fix=fill(k["fix"]),
            role=k.get("role", "cause"),
            releases=fm.releases if fm.engine == "sglang" else [],
        )
    return None
