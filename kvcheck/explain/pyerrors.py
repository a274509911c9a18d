"""General rules for Python exceptions: a traceback, or an exception line pasted alone.

What every such line still carries, from documented meanings only (``generic.yaml``):
the exception type (code mismatch, lookup of a state that is gone, a broken invariant, a
refusal with its message, network, GPU), the innermost frame of the engine's own code
(SGLang: the module under ``sglang/srt/`` and its function, mapped to the subsystem), and
from the functions on the stack the phase (an ``__init__``/registration at start-up, a
bootstrap at the first request, a transfer worker on a KV transfer). A NIXL status names
its API step; an API called with arguments it does not take names the two packages of
releases that do not go together. Imports that fail are read in ``pyenv.py``; the
findings shared with log lines (errno, NIXL statuses, message classes) in ``errorlogs.py``.
"""

from __future__ import annotations

import re

from kvcheck.explain import fixedbugs
from kvcheck.explain.errorlogs import _errno_finding, _nixl_code, _nixl_status, known_message_finding, message_class
from kvcheck.explain.formats import FormatMatch, load_formats, phase_of_function
from kvcheck.explain.native import _NIXL_ERR, errno_in
from kvcheck.explain.pyenv import _IMPORT_STMT, _LIB_MISSING, _NO_MODULE, _PKG_OF, _library_missing, _module_missing
from kvcheck.explain.rulebase import GenericFinding, engine_of_module, nixl_step, rules, sglang_subsystem

_EXC = re.compile(
    r"^(?P<qual>(?:[\w]+\.)*)(?P<type>[A-Za-z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(?P<msg>.*))?$"
)
# the ``srt/...py`` of a path through SGLang's package (``.../sglang/srt/x.py``, ``sglang/srt/x.py``)
_SRT_FILE = re.compile(r"(?:^|/)sglang/(srt/[\w/]+\.py)$")
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
# SGLang's decode-side reaction to a prefill that stopped answering its heartbeat
# (``heartbeat_checker`` -> ``_handle_node_failure``: disaggregation/{mooncake,nixl}/conn.py up
# to 0.5.x, common/conn.py in 0.5.23)
_PEER_LOST_FUNC = re.compile(r"^_?handle_node_failure$|^heartbeat_checker$")
# a function that binds a listening socket, or a source line that binds one
_LISTEN_FUNC = re.compile(r"_listener$|^_?listen\w*$|^_?bind$|^_?start_server$|^serve_forever$")
_BIND_SRC = re.compile(r"\.bind\(|zmq\.(?:ROUTER|PULL|REP|XPUB)\b")
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


def traceback_finding(
    frames: list[tuple[str, str, str]],
    tb_line: int,
    lineno: int,
    ex: re.Match[str] | None,
    src: str,
    last_import: str = "",
    recent_call: str = "",
    sglang_ok: bool = True,
    context: str = "",
) -> GenericFinding | None:
    """The general finding of a traceback (``frames``: (path, line, function), outermost
    first; ``ex``: its ``Type: message`` line matched by ``_EXC``; ``src``: the source line
    shown under the innermost frame; ``last_import``: the module the last import statement
    before it named; ``recent_call``: a NIXL API call a line shortly before showed;
    ``sglang_ok``: False when another engine wrote its lines, so never read as SGLang's;
    ``context``: the engine the log's lines so far show, '' when none), located at lines
    ``tb_line``..``lineno``. A message SGLang and another project format alike (code they share:
    vLLM's ``parallel_state.py``) under a frame whose package is not shown (``.../x.py``) or
    with no frame is said to be both, unless the log shows SGLang."""
    R = rules()
    etype = ex.group("type") if ex else ""
    msg = (ex.group("msg") or "").strip() if ex else ""
    own = [f for f in frames if engine_of_module(f[0]) not in ("", "nixl")] or frames or [("", "", "")]
    path, ln, func = own[-1]
    engine = engine_of_module(path) or ("python" if path else "")
    sub = sglang_subsystem(path) if engine == "sglang" else ""
    where = (
        f"{re.split(r'(?:site|dist)-packages/|/python/', path)[-1]}{':' + ln if ln else ''} in {func}"
        if path
        else "(no frame shown)"
    )
    funcs = [f[2] for f in frames] + re.findall(r"(\w+)\(", src)[:1]  # and what the innermost line calls
    phase = ""
    if any(_PEER_LOST_FUNC.match(f) for f in funcs):
        phase = "after-peer-restart"  # the decode's heartbeat found a prefill dead and cleans up after it
    elif any(_XFER_FUNC.match(f) for f in funcs):
        phase = "first-transfer"
    elif any(_SERVE_FUNC.match(f) for f in funcs):
        phase = "serving"
    elif any(_INIT_FUNC.match(f) for f in funcs) and not any(_LOOP_FUNC.match(f) for f in funcs):
        phase = "startup"
    elif any(_BOOT_FUNC.search(f) for f in funcs):
        phase = "first-request"
    kind = R["_exc_kind"].get(etype, "refusal" if etype else "")
    bug = fixedbugs.match(etype, msg, frames) if sglang_ok and etype else None
    if bug is not None:  # a bug SGLang fixed: its cause and the release that fixed it
        return fixed_bug_finding(bug, f"{etype}: {msg}"[:300], where, phase, tb_line, lineno, ex.group(0) if ex else "")
    # the message as SGLang formats it in its own source, release by release
    fm = sglang_format(etype, msg) if sglang_ok and etype and msg and kind not in _RUNTIME_WORDED else None
    fmt_note = ""
    shared = (
        other_format(etype, msg)
        if fm is not None and engine in ("python", "") and context not in ("sglang", "dynamo-sglang")
        else None
    )
    alike = ""  # the other project whose format the message is as much as SGLang's
    if shared is not None and fm is not None and shared.literal + 4 >= fm.literal:
        alike = shared.engine_name
        fmt_note = (
            f"the message is SGLang's and {shared.engine_name}'s alike (code they share: SGLang raises it in "
            f"{fm.where()}, {shared.engine_name} in {shared.where()}); the log does not show which of them printed it"
        )
        phase = phase or phase_of_function(fm.function, fm.module)
        fm = None
    elif fm is not None and engine == "python" and context in ("sglang", "dynamo-sglang"):
        engine = "sglang"  # a frame whose package the paste cut off, in a log that shows SGLang
    known = known_message_finding(fm, tb_line, ex.group(0)) if fm is not None and ex is not None else None
    if known is not None and (not path or engine == "sglang"):  # a message whose meaning is known
        known.lines = [tb_line, lineno] if lineno else [tb_line]
        return known
    if fm is not None and (not path or engine == "sglang"):
        span = fm.span(load_formats().releases)
        if not path:
            engine, sub, where = "sglang", sglang_subsystem(fm.path()), fm.where()
            fmt_note = f"the message is SGLang's, in releases {span}"
        else:
            fmt_note = f"SGLang raises it in {fm.where()} (the message is in releases {span})"
        phase = phase or phase_of_function(fm.function, fm.module)
    elif fmt_note:
        pass  # said above: SGLang's and another project's alike
    elif (ofm := other_format(etype, msg) if etype and msg and kind not in _RUNTIME_WORDED else None) is not None and (
        not path or engine in ("python", ofm.engine)
    ):
        # another project's own message (vLLM, NIXL, Mooncake, LMCache ...), read from its source
        span = ofm.span(ofm.all_releases)
        if not path:
            engine, where = ofm.engine, ofm.where()
        fmt_note = (
            f"the message is {ofm.engine_name}'s own: {ofm.engine_name} raises it in {ofm.where()} (its "
            f"releases {span})"
        )
        phase = phase or phase_of_function(ofm.function.replace("::", "."))
    elif sglang_ok and etype and msg and not path and kind not in _RUNTIME_WORDED and len(msg.split()) >= 3:
        fmt_note = (
            f"no SGLang release scanned ({load_formats().releases[0]} .. {load_formats().releases[-1]}) formats "
            "this message in its source, nor any release of vLLM, NIXL, UCX or Mooncake kvcheck read: it is another "
            "project's text (a wrapper such as Dynamo, a connector or a library raised it), or a release newer "
            f"than {load_formats().releases[-1]}'s"
        )
    if not phase and not frames and kind == "refusal" and _CONFIG_REFUSAL.search(msg):
        phase = "startup"  # a configuration refused, pasted alone: raised while the engine is built
    eno = _errno(msg) if etype else None
    if eno in ("98", "99") and (any(_LISTEN_FUNC.search(f) for f in funcs) or _BIND_SRC.search(src)):
        # an address a listener binds (a port taken, an address not on this host): a listening
        # thread or server binds when it starts, whatever else its name says (vLLM's
        # _nixl_handshake_listener binds its ROUTER socket as it is started)
        phase = "startup"
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
    qual = ex.group("qual") if ex else ""
    cls = next(
        (c for mrx, frx, c in R["_frame_classes"] if path and mrx.search(msg) and frx.search(f"{path}:{func}")), None
    )
    cls = cls or (message_class(msg) if msg else None)
    if cls is not None:
        return GenericFinding(
            id=cls["id"],
            title=cls["title"],
            engine=engine or "python",
            line=tb_line,
            phase=cls.get("phase") or phase,
            component=engine or "the process",
            text=ex.group(0)[:300] if ex else "",
            lines=[tb_line, lineno] if lineno else [tb_line],
            cause=f"{head[:200]} at {where}: "
            + cls["cause"]
            + (f" {fmt_note[:1].upper()}{fmt_note[1:]}." if fmt_note else ""),
            checks=[f"the {engine or 'engine'} release in use and its notes for this message"],
            fix=cls["fix"],
        )
    for trx, mrx, x in R["_library_exceptions"] if etype else ():
        if trx.fullmatch(etype) and (mrx.search(qual) or any(mrx.search(f[0]) for f in frames)):
            return GenericFinding(
                id=x["id"],
                title=x["title"],
                engine=engine or "python",
                line=tb_line,
                phase=phase,
                component=x["component"],
                text=ex.group(0)[:300] if ex else "",
                lines=[tb_line, lineno] if lineno else [tb_line],
                cause=f"{head[:160]} at {where}: " + x["cause"],
                checks=list(x["checks"]),
                fix=x["fix"],
            )
    if etype == "AttributeError":
        got = attribute_mismatch(msg, engine, where, phase, (tb_line, lineno, ex.group(0) if ex else ""))
        if got is not None:
            return got
    if etype == "IndexError":
        got = config_list_short(src, engine, where, phase, (tb_line, lineno, ex.group(0) if ex else ""))
        if got is not None:
            return got
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
    if alike:
        checks.insert(0, f"which process printed it: SGLang or {alike} (the process's own log lines and release)")
    elif fm is None and fmt_note:
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
    elif alike:
        title = f"{'traceback' if frames else 'exception'} (SGLang's or {alike}'s text): {head}"
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
        frame=f"{m.group(1)}:{func}" if engine == "sglang" and (m := _SRT_FILE.search(path)) else "",
        frame_line=ln,
        frame_raised=ex is not None,
    )


def fixed_bug_finding(
    bug: fixedbugs.FixedBug, head: str, where: str, phase: str, tb_line: int, lineno: int, text: str
) -> GenericFinding:
    """The finding of an indexed SGLang bug (``fixed_bugs.yaml``): its cause, the release that
    fixed it and the releases that have it, from the releases' own source."""
    return GenericFinding(
        id=bug.id,
        title=f"SGLang bug fixed in {bug.fixed_in}: {bug.title}",
        engine="sglang",
        line=tb_line,
        phase=bug.phase or phase,
        component="SGLang: a bug SGLang fixed (kvcheck's index of fixed bugs, from the releases' source)",
        text=text[:300],
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=f"{head}{'' if where.startswith('(') else ' at ' + where}: {bug.cause}. A known SGLang bug "
        f"({bug.refs()}); fixed in SGLang {bug.fixed_in} "
        f"(the first release whose source has the fix); releases with the bug: {bug.affected_text()}.",
        checks=[
            f"the SGLang release of each server (pip show sglang): {bug.fixed_in} or later has the fix",
        ],
        fix=bug.fix[:1].upper() + bug.fix[1:] + ".",
    )


def other_format(etype: str, msg: str) -> FormatMatch | None:
    """Another project's message format an exception's message is (``formats.match_line``:
    vLLM, NIXL, Mooncake, LMCache ...), under the same rule as ``sglang_format``."""
    from kvcheck.explain.formats import match_line

    fm = match_line(msg)[1]
    if fm is None:
        return None
    if fm.exception_type == etype or fm.literal >= 30 or (etype == "AssertionError" and fm.kind == "assert"):
        return fm
    return None


# CPython's AttributeError on an instance: ``'pkg.mod.Class' object has no attribute 'name'``
_NO_ATTR = re.compile(r"'(?P<cls>[\w.]+)' object has no attribute '(?P<attr>\w+)'")


def attribute_mismatch(
    msg: str, engine: str, where: str, phase: str, at: tuple[int, int, str]
) -> GenericFinding | None:
    """``'<package>.<Class>' object has no attribute '<name>'`` where the class is of another
    package than the caller: the caller uses an API the installed package does not have —
    two packages of releases that do not go together."""
    m = _NO_ATTR.search(msg)
    if m is None or "." not in m.group("cls"):
        return None
    cls, attr = m.group("cls"), m.group("attr")
    owner = engine_of_module("/" + cls.replace(".", "/") + "/") or cls.split(".")[0]
    if owner in ("", "builtins", "torch") or owner == engine:
        return None
    pkg = _PKG_OF.get(cls.split(".")[0], cls.split(".")[0])
    who = engine if engine and engine != "python" else "the caller"
    return GenericFinding(
        id="api-version-mismatch",
        title=f"{who} calls {cls.rsplit('.', 1)[-1]}.{attr}, which the installed {owner} does not have",
        engine=engine or owner,
        line=at[0],
        phase=phase,
        component=f"{who} -> {owner} API",
        text=at[2][:300],
        lines=[at[0], at[1]] if at[1] else [at[0]],
        cause=f"{msg[:200]} at {where}: {who} uses {attr} of {owner}'s {cls}, which the installed {owner} "
        f"does not provide: the two packages are of releases that do not go together (the caller expects a "
        f"newer or older {owner} API).",
        checks=[
            f"pip show {pkg} {engine if engine not in ('', 'python') else ''}".rstrip() + "   # the versions",
            f"which {pkg} release added (or removed) {attr}: its changelog / source",
        ],
        fix=f"Upgrade (or pin) {pkg} to the release the caller was made for, or use the caller's release made "
        f"for the installed {pkg}; or turn off the feature that calls {attr}.",
    )


# a list indexed by a process's own rank (``config.worker_ports[self.worker_id]``); the
# dotted name read from its start, its last part taken whole (no backtracking: a source
# line of 8000 word characters costs one pass, not minutes)
_RANK_INDEX = re.compile(
    r"(?<![\w.])(?P<list>(?>(?:[\w.]*\.)?)(?P<name>\w++))\[\s*(?:self\.)?(?P<idx>worker_id|rank|local_rank|tp_rank|dp_rank|pp_rank"
    r"|global_rank|device_id|gpu_id|local_gpu_id|node_rank|worker_rank|tp_rank_id)\s*\]"
)


def config_list_short(src: str, engine: str, where: str, phase: str, at: tuple[int, int, str]) -> GenericFinding | None:
    """``IndexError`` on a list indexed by the process's own rank: the configured list has
    fewer entries than there are processes (one per rank/worker is needed)."""
    m = _RANK_INDEX.search(src)
    if m is None:
        return None
    name, idx = m.group("name"), m.group("idx")
    return GenericFinding(
        id="config-list-shorter-than-ranks",
        title=f"{name} has fewer entries than the processes that index it by {idx}",
        engine=engine or "python",
        line=at[0],
        phase=phase or "startup",
        component=f"{engine or 'the process'} configuration ({name})",
        text=at[2][:300],
        lines=[at[0], at[1]] if at[1] else [at[0]],
        cause=f"IndexError at {where}: `{src.strip()[:120]}` indexes the list {name} by the process's {idx}; "
        f"a worker's {idx} is past its end, so the list has fewer entries than there are workers (it needs one "
        f"per rank: the tensor-parallel size x the other parallel sizes on the node).",
        checks=[f"the length of {name} in the configuration against the number of workers (TP x DP x PP per node)"],
        fix=f"Give {name} one entry per worker (as many as the tensor-parallel size and the other parallel sizes "
        f"make), or lower the parallel size to the entries it has.",
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
