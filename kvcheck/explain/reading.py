"""Read a log as a whole: whose lines, which release, which phase, the first cause and
what followed from it.

``LogReader`` sees every line once, in order, next to the catalog scan of
``matcher.explain_blocks`` (the same pass, bounded memory): it attributes the line
(``lines.Attributor``), feeds the crash/known-issue ``SignatureScanner``, the
``Timeline`` and the ``ReleaseReader``, and counts lines per engine and process.
``LogReader.report`` combines that with the catalog hits into a ``LogReport``:

- ``engines``: per engine, its lines (count, first/last, the processes, an example) and
  what kvcheck explains for it (``lines.SUPPORT``);
- ``release``: the SGLang release the log shows, with its evidence;
- ``findings``: every recognized failure (catalog message or signature) with its engine,
  process and phase (from the log's own milestones when it shows them, else the
  message's default), in line order;
- ``first_cause`` and ``then``: the earliest failure that is a cause (not a time-out, an
  abort or a wrapper), and what followed it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from kvcheck.explain import fixedbugs, funcchanges
from kvcheck.explain.generic import GenericReader
from kvcheck.explain.lines import ENGINE_NAMES, SUPPORT, Attributor, LineInfo
from kvcheck.explain.logrelease import _EXPLICIT_KINDS, LogRelease, ReleaseReader
from kvcheck.explain.mooncake_native import in_sglang as mooncake_in_sglang
from kvcheck.explain.rulebase import rules
from kvcheck.explain.signatures import SignatureScanner, signature
from kvcheck.explain.timeline import Timeline
from kvcheck.release.version import version_key

# engines whose lines the SGLang catalog may explain (a NIXL/UCX line explains in
# SGLang's terms only when it ran in an SGLang process or nothing shows otherwise)
CATALOG_ENGINES = {"sglang", "", "python", "native"}
LIBRARY_ENGINES = {"nixl", "ucx", "libfabric", "mooncake", "mori"}
PROCESS_ENGINES = {
    "sglang",
    "sglang-router",
    "vllm",
    "vllm-ascend",
    "trtllm",
    "lmcache",
    "dynamo",
    "dynamo-vllm",
    "lightllm",
    "vllm-omni",
    "xllm",
}
_PHASE_WORDS = {
    "start-up": "startup",
    "startup": "startup",
    "first request": "first-request",
    "transfer": "first-transfer",
    "decode registration": "decode-registration",
    "first contact": "first-request",
    "serving": "serving",
}


class EngineLines(BaseModel):
    engine: str
    name: str
    count: int = 0
    first_line: int = 0
    last_line: int = 0
    processes: dict[str, int] = Field(default_factory=dict)
    example: str = ""
    support: str = ""


class Finding(BaseModel):
    """One recognized failure: a catalog message (``kind`` catalog) or a signature."""

    kind: str  # catalog | signature
    id: str
    title: str
    engine: str  # whose text
    host: str = ""  # the process engine it ran in ('' when the log does not show)
    process: str = ""
    phase: str = ""
    phase_from: str = ""  # log | message
    # whether the log shows any event (start-up, request, restart) at or before the finding: False
    # when the phase is the message's own, or '' and said 'phase not shown in the log'
    phase_shown: bool = True
    role: str = "cause"
    first_line: int = 0
    last_line: int = 0
    count: int = 1
    text: str = ""
    values: dict[str, str] = Field(default_factory=dict)
    cause: str = ""
    fix: str = ""
    checks: list[str] = Field(default_factory=list)
    issues: list[str] = Field(default_factory=list)
    fixed_in: str | None = None
    followed_by: str = ""
    predicted_by: str | None = None
    # the node's state shown by a command pasted with the log (ibv_devices, ulimit): a
    # precondition of the processes, older than any of the log's lines
    precondition: bool = False

    @property
    def explains(self) -> bool:
        """Whether the finding says more than the line's own words: False for an error or
        warning line of a process kvcheck has no message formats for (Dynamo's Rust
        runtime, TensorRT-LLM, the router: ``generic.GenericReader._unmodeled_line``),
        which is attributed to that process and repeated, not explained."""
        return not (
            self.kind == "generic"
            and self.engine in _UNMODELED_ENGINES
            and self.id.endswith(("-error-log-generic", "-warning-log-generic"))
        )


@dataclass
class _At:
    """Where a general rule's finding is (the fields ``LogReader._finding`` reads)."""

    first_line: int
    last_line: int
    count: int
    text: str
    values: dict[str, str]


class LogReport(BaseModel):
    engines: list[EngineLines] = Field(default_factory=list)
    release: LogRelease = Field(default_factory=LogRelease)
    timeline: list[dict[str, Any]] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    first_cause: Finding | None = None
    then: list[Finding] = Field(default_factory=list)
    not_sglang: list[str] = Field(default_factory=list)  # engines whose lines kvcheck does not explain


class LogReader:
    """The per-line observer (see the module docstring)."""

    def __init__(self) -> None:
        self.attr = Attributor()
        self.sigs = SignatureScanner()
        self.timeline = Timeline()
        self.release = ReleaseReader()
        self.generic = GenericReader()
        self.generic.context = self.attr.context_engine
        self.engines: dict[str, EngineLines] = {}
        self.infos: dict[int, LineInfo] = {}  # only lines that completed a signature
        self.hit_info: dict[int, LineInfo] = {}
        # the paste's line number of a line as read (``prefixes.Paste.pasted_line``), for the
        # line numbers a cause's text quotes
        self.pasted: Callable[[int], int] = int
        # where the role a collector's label names (``sglang-decode-0 | ``) changes: (line, role)
        self._label_roles: list[tuple[int, str]] = [(0, "")]

    def feed(self, lineno: int, line: str, role: str = "") -> LineInfo:
        if role != self._label_roles[-1][1]:
            self._label_roles.append((lineno, role))
        info = self.attr.feed(line, role)
        if info.engine:
            e = self.engines.get(info.engine)
            if e is None:
                text = line.strip()
                e = self.engines[info.engine] = EngineLines(
                    engine=info.engine,
                    name=ENGINE_NAMES.get(info.engine, info.engine),
                    first_line=lineno,
                    example=text[:300] + ("…" if len(text) > 300 else ""),
                    support=SUPPORT.get(info.engine, ""),
                )
            e.count += 1
            e.last_line = lineno
            if info.process:
                e.processes[info.process] = e.processes.get(info.process, 0) + 1
        self.timeline.feed(lineno, line)
        self.release.feed(lineno, line)
        # another engine's line is never read as one of SGLang's formats
        foreign = info.engine in PROCESS_ENGINES - {"sglang"} or info.host in PROCESS_ENGINES - {"sglang"}
        self.generic.feed(lineno, line, sglang_formats=not foreign, engine=info.engine)
        done = self.sigs.feed(
            lineno,
            line,
            process=info.process,
            host=info.host or (info.engine if info.engine in PROCESS_ENGINES else ""),
        )
        if done:
            self.infos[lineno] = info
        return info

    def label_role_at(self, lineno: int) -> str:
        """The role the collector's label of line ``lineno`` named ('' none)."""
        return self._label_roles[bisect_right(self._label_roles, (lineno, "\uffff")) - 1][1]

    def engines_other_than_sglang(self) -> list[str]:
        return [e for e in self.engines if e not in ("sglang", "python", "native")]

    def catalog_allowed(self, info: LineInfo) -> bool:
        """Whether SGLang's catalog may explain this line."""
        if info.engine in CATALOG_ENGINES:
            return not info.host or info.host in ("sglang", "python", "native")
        if info.engine in LIBRARY_ENGINES:
            return info.host in ("", "sglang")
        return False

    # ------------------------------------------------------------------ the report
    def report(self, hits: list, catalog) -> LogReport:
        rep = LogReport(release=self.release.result(), timeline=self.timeline.summary())
        rep.engines = sorted(self.engines.values(), key=lambda e: e.first_line)
        if self.attr.under_dynamo:
            # Dynamo's vLLM worker prints vLLM's format (``ERROR 03-20 02:45:15 engine.py:244]``):
            # the lines are named as Dynamo's worker, their signatures still apply as vLLM's
            for e in rep.engines:
                if e.engine == "vllm":
                    e.engine, e.name, e.support = "dynamo-vllm", ENGINE_NAMES["dynamo-vllm"], SUPPORT["dynamo-vllm"]
        ctx = self.attr.context_engine()
        findings: list[Finding] = []
        for h in self.sigs.finish():
            s = signature(h.id)
            host = h.host or ctx
            if s.engine in ("sglang",) and host not in ("sglang", ""):
                continue  # an SGLang signature on another engine's line
            if s.engine in ("vllm",) and host not in ("vllm", "vllm-ascend", ""):
                continue
            if (
                s.host
                and host
                and host not in s.host
                and (s.strict_host or s.engine not in ("ucx", "nixl", "python", "libfabric", "mooncake"))
            ):
                continue
            if s.strict_host and not host:
                continue
            findings.append(
                self._finding(
                    "signature",
                    h,
                    s.phase,
                    anytime=s.phase_log,
                    id=s.id,
                    title=s.title,
                    engine=s.engine,
                    host=host,
                    process=h.process or s.process,
                    role=s.role,
                    cause=_fill(s.cause, h.values),
                    fix=_fill(s.fix, h.values),
                    checks=[_fill(c, h.values) for c in s.checks],
                    issues=s.issues,
                    fixed_in=s.fixed_in,
                    followed_by=s.followed_by,
                    predicted_by=s.predicted_by,
                )
            )
        sig_ids = {f.id for f in findings}
        for hit in hits:
            if hit.match == "id":
                continue
            e = catalog.get(hit.entry_id)
            when = _PHASE_WORDS.get(e.when.split(" (")[0].strip(), "any")
            info = self.hit_info.get(hit.first_line)
            role = (
                "consequence"
                if e.generic or e.id in _CONSEQUENCES or (e.type.startswith("nixl") and sig_ids)
                else "cause"
            )
            if e.severity == "warning" and role == "cause":
                role = "warning"
            title = (hit.text if hit.match == "full" else e.template.rstrip())[:160]
            findings.append(
                self._finding(
                    "catalog",
                    hit,
                    when,
                    id=e.id,
                    title=title,
                    engine="nixl" if e.type.startswith("nixl") else "sglang",
                    host=(info.host if info else "")
                    or ("sglang" if ctx == "sglang" or (ctx == "" and not e.type.startswith("nixl")) else ctx),
                    process=(info.process if info else "") or (e.process if e.process != "both" else ""),
                    role=role,
                    cause=e.meaning,
                    fix=e.fix,
                    predicted_by=e.check,
                )
            )
        findings.extend(self._generic(findings, ctx))
        stacks = {"native-crash-generic"} | {c["id"] for _rx, c in rules()["_known_crashes"]}
        crashes = [f for f in findings if f.id in stacks]
        if crashes:  # the stack named where it died: the bare "a crash happened" headers say less
            findings = [
                f
                for f in findings
                if not (
                    (
                        f.id in ("ucx-signal-generic", "python-segfault-generic")
                        # UCX's own "Caught signal N" line read by its format (the same header)
                        or (f.id == "ucx-error-log-generic" and "Caught signal" in f.text)
                    )
                    and any(abs(f.first_line - c.first_line) <= 60 for c in crashes)
                )
            ]
        _backend_first(findings)
        _after_reconnect(findings, self.timeline.reconnects, self.timeline.mooncake_reconnects, self.pasted)
        fmts = [(ln, fm.releases, fm.where()) for ln, fm in self.generic.format_hits]
        fmts += [(g.line, g.releases, "an exception's message") for g in self.generic.found if g.releases]
        _narrow_by_messages(rep, hits, fmts)
        findings.sort(key=lambda f: (f.first_line, 0 if f.kind == "signature" else 1))
        _known_fixed(findings, rep.release)
        _release_evidence(findings, rep.release)
        for f in findings:
            if f.engine != "sglang" and f.host != "sglang":
                f.fix = _in_host_words(f.fix, f.host, f.text)
                f.checks = [_in_host_words(c, f.host, f.text) for c in f.checks]
        rep.findings = findings
        rep.first_cause, rep.then = _chain(findings)
        rep.not_sglang = [e.engine for e in rep.engines if e.engine in PROCESS_ENGINES - {"sglang"}]
        return rep

    def _generic(self, findings: list[Finding], ctx: str) -> list[Finding]:
        """The general rules' findings (``generic.py``) on lines no specific cause covers."""
        covered: set[int] = set()
        for f in findings:
            if f.role == "cause" and not f.id.endswith("-generic") and not (f.kind == "catalog" and f.engine == "nixl"):
                # a wrapper or time-out does not explain the traceback it wraps, nor does a
                # signal handler's generic header the stack below it, nor a NIXL status code
                # alone the step it failed in
                covered.update(range(f.first_line, min(f.last_line, f.first_line + 200) + 1))
        # a line the catalog already reads as SGLang's wrapper of another failure (a consequence)
        wrapped = [f for f in findings if f.kind == "catalog" and f.role == "consequence"]
        wrapped_lines = {f.first_line for f in wrapped}
        wrapped_heads = {f.text.strip()[:30] for f in wrapped if len(f.text.strip()) >= 30}
        out: list[Finding] = []
        same: dict[tuple[str, str], Finding] = {}
        for g in self.generic.finish():
            if not g.node and any(n in covered for n in (g.lines or [g.line])):
                # (a node's command output is the state every process ran in, never part of
                # the block a cause explains, even inside the span of a message seen twice)
                continue
            if g.id == "sglang-error-log-generic" and (
                g.line in wrapped_lines or any(h in g.text for h in wrapped_heads)
            ):
                continue
            prev = same.get((g.id, g.cause[:80]))
            if prev is not None:  # the same failure again (another rank, another device)
                prev.count += 1
                prev.last_line = max(prev.last_line, g.line)
                continue
            at = _At(
                g.line,
                max(g.lines or [g.line]),
                1,
                g.text,
                {
                    "component": g.component,
                    **({"frame": g.frame} if g.frame else {}),
                    **({"frame_line": g.frame_line} if g.frame and g.frame_line else {}),
                    **({"frame_raised": "1"} if g.frame and g.frame_raised else {}),
                    **({"phase_log": "1"} if g.phase_log else {}),
                },
            )
            out.append(
                self._finding(
                    "generic",
                    at,
                    g.phase or "any",
                    id=g.id,
                    title=g.title,
                    engine=g.engine,
                    host=ctx,
                    # the router's own words are the router process's (its label may say so too)
                    process=self.label_role_at(g.line) or ("router" if g.engine == "sglang-router" else ""),
                    role=g.role,
                    cause=g.cause,
                    fix=g.fix + (mooncake_in_sglang(g.id) if g.engine == "mooncake" and ctx == "sglang" else ""),
                    checks=g.checks,
                    precondition=g.node,
                )
            )
            same[(g.id, g.cause[:80])] = out[-1]
        return out

    def _finding(self, kind: str, at: Any, default_phase: str, anytime: bool = False, **fields: Any) -> Finding:
        """A ``Finding`` of ``kind`` located where ``at`` (a catalog ``Hit``, a
        ``SignatureHit`` or an ``_At``) says, in the phase the log shows there (else
        ``default_phase``, the message's own); ``anytime``: what failed runs in any phase
        (``_phase``)."""
        phase, src = self._phase(
            at.first_line, default_phase, anytime or at.values.get("phase_log") == "1", at.last_line
        )
        return Finding(
            kind=kind,
            phase=phase,
            phase_from=src,
            phase_shown=bool(self.timeline.phase_at(max(at.first_line, min(at.last_line, at.first_line + 20)))),
            first_line=at.first_line,
            last_line=at.last_line,
            count=at.count,
            text=at.text,
            values=at.values,
            **fields,
        )

    def _phase(self, lineno: int, default: str, anytime: bool = False, last: int = 0) -> tuple[str, str]:
        """The phase of a finding at ``lineno``: the one the log's own events show there, else
        ``default`` (the message's own). A failure whose activity runs in any phase
        (``anytime``: a crash while a progress thread waited for events) while the log still
        shows the start-up, before the server said it is ready, happened at start-up. A
        message over several lines (``lineno``..``last``) that itself shows an event (the
        request it failed for: ``req.bootstrap_room=...``) is in the phase that event opens,
        when nothing before it shows one."""
        p = self.timeline.phase_at(lineno)
        if not p and last > lineno:
            p = self.timeline.phase_at(min(last, lineno + 20))
        if anytime and p == "startup" and not (self.timeline.ready_line and self.timeline.ready_line < lineno):
            return "startup", "log"
        if default == "decode-registration" and p != "after-peer-restart":
            # the message itself says when it runs (the decode's registration reaching the
            # prefill's bootstrap thread), more exactly than the log's request phase does
            return default, "message"
        if p:
            if p == "first-request" and default == "first-transfer":
                return "first-transfer", "log"
            if p == "startup" and default in _REQUEST_PHASES:
                # no request seen yet does not make a failure that only a transfer (or a
                # peer) can cause a start-up one: the message's own phase stands
                return default, "message"
            return p, "log"
        return (default if default != "any" else ""), "message"


# SGLang's own flags that library signatures and general rules name in their fixes (Mooncake's
# devices are SGLang's --disaggregation-ib-device), and the setting they are in any engine's words
_SGLANG_FLAG = re.compile(r"(?<![\w-])--disaggregation-[a-z][\w-]*")
_LABELED = re.compile(r"\s*\(SGLang: (--disaggregation-[a-z][\w-]*)[^()]*\)")
_SETTING_WORDS = {"--disaggregation-ib-device": "the RDMA devices the process gives its transfer engine"}
_UNSHOWN_HOSTS = ("", "dynamo", "python", "native")  # the process is not shown (Dynamo runs either engine)


def _in_host_words(text: str, host: str, said: str = "") -> str:
    """``text`` (a fix or check of a library's failure: Mooncake, NIXL, UCX, the OS) for the
    process it happened in (``host``): SGLang's flags stay for an SGLang process, are named as
    SGLang's where the log does not show the process, and give way to the setting in general
    words for another engine's process (vLLM, LMCache, TensorRT-LLM ...: their own settings
    choose it, never SGLang's flags). A flag the log line itself says (``said``) is its own."""
    if host == "sglang" or "--disaggregation-" not in text:
        return text
    name = ENGINE_NAMES.get(host, host)
    if host not in _UNSHOWN_HOSTS:
        text = _LABELED.sub(
            lambda m: m.group(0) if m.group(1) in said else f" ({name}'s own setting, not SGLang's {m.group(1)})", text
        )

    def words(m: re.Match[str]) -> str:
        flag = m.group(0)
        if flag in said or text[max(0, m.start() - 12) : m.start()].endswith(("SGLang: ", "SGLang's ")):
            return flag
        what = _SETTING_WORDS.get(flag)
        if host in _UNSHOWN_HOSTS:
            return flag if "SGLang" in text else f"{flag} (SGLang's flag)"
        return (
            f"{what} ({name}'s own setting, not SGLang's {flag})" if what else f"{name}'s setting for SGLang's {flag}"
        )

    return _SGLANG_FLAG.sub(words, text)


_CONSEQUENCES = {
    "bootstrap-timeout",
    "waiting-timeout",
    "failed-on-another-rank",
    "kv-transfer-error",
    "decode-transfer-failed",
    "prefill-bootstrap-failed",
    "prefill-transfer-failed",
    "unexpected-transfer-worker-error",
    "scheduler-exception",
}


def _narrow_by_messages(rep: LogReport, hits: list, formats: list[tuple[int, list[str], str]] | None = None) -> None:
    """Messages that exist only in some releases are release evidence too: the process
    printing one runs one of them. ``hits``: catalog messages (``releases.json``);
    ``formats``: (line, releases, where) of the lines matched whole by a release's message
    format (``formats.json.gz``, every release's own source). A message only releases
    older than the modeled window have is said (a clue) and narrows nothing."""
    from kvcheck.explain.logrelease import ReleaseClue
    from kvcheck.explain.releases import load_message_releases
    from kvcheck.sglang.releases import release_key

    data = load_message_releases()
    allrel = data["releases"]
    cands: set[str] | None = None
    evidence: list[tuple[str, str, int, set[str]]] = []
    for hit in hits:
        if hit.match != "full":
            continue
        rng = data["messages"].get(hit.entry_id)
        if not isinstance(rng, list) or not rng:
            continue
        ok = {v for v in allrel if any(release_key(a) <= release_key(v) <= release_key(b) for a, b in rng)}
        evidence.append(("message text", hit.entry_id, hit.first_line, ok))
    seen: set[tuple[str, ...]] = set()
    for line, rels, where in formats or []:
        key = tuple(rels)
        if key in seen or not rels:
            continue
        seen.add(key)
        ok = set(rels) & set(allrel)
        if not ok:  # only releases before the modeled window have it
            rep.release.clues.append(
                ReleaseClue(kind="message format", value=f"{where} (releases {rels[0]} .. {rels[-1]})", line=line)
            )
            continue
        evidence.append(("message format", where, line, ok))
    for kind, value, line, ok in evidence:
        if ok == set(allrel):
            continue
        rep.release.clues.append(ReleaseClue(kind=kind, value=value, line=line, releases=sorted(ok, key=release_key)))
        if cands is not None and not (cands & ok):
            continue  # evidence that contradicts the rest (a patched build): said, not intersected
        cands = ok if cands is None else cands & ok
    if cands is None or rep.release.release:
        return
    base = set(rep.release.candidates) if rep.release.candidates else set(allrel)
    narrowed = base & cands
    if narrowed:
        rep.release.candidates = sorted(narrowed, key=release_key)
        rep.release.older_possible = False
        if len(narrowed) == 1 and not rep.release.dev_build:
            rep.release.release = rep.release.candidates[0]


_BACKEND_ENGINES = {"ucx", "libfabric", "mooncake"}
# processes whose lines kvcheck has no message formats for (``generic._UNMODELED``)
_UNMODELED_ENGINES = {"dynamo", "trtllm", "sglang-router", "dynamo-vllm"}


def _backend_first(findings: list[Finding]) -> None:
    """A NIXL status follows from the backend's own error line before it (NIXL reports the
    backend's failure as ``NIXL_ERR_BACKEND``): the status becomes what followed, the
    backend line (within 40 lines before it) the cause."""
    backend = [f.first_line for f in findings if f.role == "cause" and f.engine in _BACKEND_ENGINES]
    if not backend:
        return
    for f in findings:
        if f.id == "nixl-status-generic" or (f.kind == "catalog" and f.engine == "nixl"):
            if any(0 <= f.first_line - b <= 40 for b in backend):
                f.role = "consequence"


# a failure on the wire of an established connection (RDMA completion errors, UCX's
# transport retries)
_WIRE = re.compile(
    r"retry (?:count(?:er)? )?exceeded|RETRY_EXC|REM_ACCESS|remote access error|Transport retry count|"
    r"WR_FLUSH|Endpoint timeout|ENDPOINT_TIMEOUT|local length error|LOC_LEN_ERR",
    re.I,
)


_LOOP = 3  # connections rebuilt after a wire failure that make a reconnect loop


def _after_reconnect(
    findings: list[Finding], reconnects: list[int], mooncake: bool = False, pasted: Callable[[int], int] = int
) -> None:
    """Wire failures that follow a rebuilt connection (the log shows the endpoint
    re-established or reset before them): said, since after a reconnect the two sides may
    disagree on the queue pair (a stale handshake reply, the peer still on the old QP),
    which a faulty NIC does not explain."""
    if not reconnects:
        return
    for f in findings:
        if f.role != "cause" or not _WIRE.search(f.title + " " + f.cause):
            continue
        before = [ln for ln in reconnects if ln < f.first_line]
        after = [ln for ln in reconnects if ln > f.first_line]
        if len(after) >= _LOOP and not before:
            f.cause += (
                f" After it the log shows the connection rebuilt {len(after)} times "
                f"(lines {pasted(after[0])}..{pasted(after[-1])}): "
                "a reconnect loop, the rebuilt queue pairs failing again the same way, so the fault stays on that "
                "path (the sizes or MTU the two sides use, the NIC pair) and is not transient"
                + (
                    "; Mooncake releases before its reconnect-storm fix (PR #3387, after v0.3.12) retire and rebuild "
                    "the endpoint on every such error instead of marking the peer's path failed."
                    if mooncake
                    else "."
                )
            )
            continue
        if not before:
            continue
        f.cause += (
            " The log shows the connection to the peer re-established (the endpoint reset) at line "
            f"{pasted(before[-1])}, "
            "before these failures: work requests failing right after a reconnect point to the two sides "
            "disagreeing on the queue pair (a stale handshake reply of the earlier connection, or the peer "
            "still using the old QP: a reconnect race) rather than to a faulty NIC."
        )


_FIXED_COMPONENT = "SGLang: a bug SGLang fixed (kvcheck's index of fixed bugs, from the releases' source)"


def _known_fixed(findings: list[Finding], rel: LogRelease) -> None:
    """Findings of SGLang bugs a merged change fixed (``fixedbugs``): a logged line or a
    catalog message whose whole text is an indexed bug's becomes that bug's finding (its cause,
    the fixing release); and each says when the log's release already has the fix."""
    by_id = {b.id: b for b in fixedbugs.index()}
    for f in findings:
        bug = by_id.get(f.values.get("fixed_bug") or f.id)
        if bug is None and f.engine in ("sglang", "nixl") and f.role in ("cause", "consequence"):
            bug = fixedbugs.match_text(f.text)
            if bug is not None:
                meaning = f" ({f.cause.rstrip('.')})" if f.kind == "catalog" and f.cause else ""
                if f.kind != "catalog":  # a catalog finding keeps its entry's id (the catalog is looked up by it)
                    f.id = bug.id
                f.role = "cause"
                f.title = f"SGLang bug fixed in {bug.fixed_in}: {bug.title}"
                f.cause = (
                    f"{bug.cause[:1].upper()}{bug.cause[1:]}. A known SGLang bug ({bug.refs()}); fixed in SGLang "
                    f"{bug.fixed_in}; releases with the bug: {bug.affected_text()}.{meaning}"
                )
                f.fix = bug.fix[:1].upper() + bug.fix[1:] + "."
                f.values = {**f.values, "component": _FIXED_COMPONENT, "fixed_bug": bug.id}
                f.checks = [f"the SGLang release of each server (pip show sglang): {bug.fixed_in} or later has the fix"]
                if f.phase_from != "log" and bug.phase:
                    f.phase, f.phase_from = bug.phase, "message"
        if bug is None:
            continue
        # only a release the log states (a version line, an image tag ...): a message or frames that
        # fit releases from the fix on are also what a main-branch build between releases prints
        stated = rel.release and any(c.kind in _EXPLICIT_KINDS and c.value == rel.release for c in rel.clues)
        if stated and version_key(rel.release or "") >= version_key(bug.fixed_in):
            f.cause += (
                f" The log's release ({rel.text()}) already has this fix: if it is right, this is another cause with "
                "the same words (or a regression)."
            )


def _release_evidence(findings: list[Finding], rel: LogRelease) -> None:
    """An SGLang traceback that only a general rule reads: add the releases its frames fit and
    whether the function that raised changed in a later release (``funcchanges.evidence``)."""
    for f in findings:
        frame = f.values.get("frame", "")
        if f.id != "python-exception-generic" or not frame:
            continue
        srt_file, _, func = frame.rpartition(":")
        ln = f.values.get("frame_line", "")
        got = funcchanges.evidence(
            srt_file, func, rel, line=int(ln) if ln.isdigit() else 0, raised=f.values.get("frame_raised") == "1"
        )
        if got is None:
            continue
        cause, fix = got
        f.cause = f"{f.cause} {cause}"
        f.fix = f"{f.fix}{fix}"


def _fill(text: str, values: dict[str, str]) -> str:
    for k, v in values.items():
        text = text.replace("{" + k + "}", v)
    return text


def _rank(f: Finding) -> float:
    """0: a specific cause; 1: a general rule's cause class (``generic.py``: errno, a missing
    library, RDMA completion status ...) or a generic signature; 1.5: a failure only located
    (component, phase); 2: consequences (time-outs, wrappers); 3: warnings."""
    if f.precondition:
        return 1.6  # the node's state: first only where it explains the failures (``_chain``) or alone
    if f.kind == "catalog" and f.engine == "nixl" and f.role == "cause":
        return 1.2  # a NIXL status code alone: what failed, not in which step or why
    if f.role == "cause" and f.kind == "generic":
        if f.id.endswith("-error-log-generic") and f.engine in _UNMODELED_ENGINES:
            return 1.7  # a process's own words kvcheck has no formats for: below any located cause
        if f.id == "nixl-status-generic" and "(" in f.values.get("component", ""):
            return 1  # the status with the API step it failed in
        return 1.5 if f.id.endswith("-generic") else 1
    if (
        f.role == "cause"
        and not f.id.endswith("-generic")
        and f.id not in ("nixl-create-backend-failed", "nixl-register-mem-failed")
    ):
        return 0
    if f.role == "cause":
        return 1
    if f.role == "warning":
        return 3
    return 2


# findings that are a process dying (signal handlers, fault dumps, crash stacks)
_CRASH = re.compile(r"segv|segfault|crash|signal|abort", re.I)
_CRASH_AFTER = 30  # lines between an error and the crash it led to, at most

_REQUEST_PHASES = {"first-request", "decode-registration", "first-transfer", "serving", "after-peer-restart"}


def _chain(findings: list[Finding]) -> tuple[Finding | None, list[Finding]]:
    """The first cause (the earliest finding of the best rank) and what came after it."""
    if not findings:
        return None, []
    best = min(_rank(f) for f in findings)
    if best == 3 and any(f.role == "consequence" for f in findings):
        best = 2
    first = next(f for f in findings if _rank(f) == best)
    if _CRASH.search(first.id):
        # a crash right after an error line of the same log: the error is the first cause,
        # the crash what followed (an error path that dies, a library aborting on it)
        before = [
            f
            for f in findings
            if f.role == "cause"
            and f is not first
            and not _CRASH.search(f.id)
            and 0 < first.first_line - f.first_line <= _CRASH_AFTER
            and _rank(f) <= 1.5
        ]
        if before:
            first = before[0]
    pre = next((f for f in findings if f.precondition and f.role == "cause"), None)
    if pre is not None and first is not pre and first.phase in _REQUEST_PHASES:
        # a node without what the transfer needs (no RDMA device, a small memlock limit)
        # explains the failures of requests and transfers that follow it; it does not
        # explain a start-up refusal of the configuration
        first = pre
    then, lines_seen = [], {first.first_line}
    for f in findings:
        if f is first or not (f.first_line >= first.first_line or f.role == "consequence" or first.precondition):
            continue
        if f.first_line in lines_seen and f.role != "cause":
            continue  # the same line read twice (a NIXL code in the catalog and as a signature)
        lines_seen.add(f.first_line)
        then.append(f)
    return first, then
