"""Print an ``Explanation`` for a person (plain text, one block per recognized message)."""

from __future__ import annotations

import json
import textwrap

from kvcheck.explain.catalog import Catalog, load_catalog
from kvcheck.explain.evidence import consistent_fix, flag_lines, flags_in, refused_values
from kvcheck.explain.matcher import Explanation

_WIDTH = 100


def _para(label: str, text: str) -> list[str]:
    body = textwrap.wrap(" ".join(text.split()), width=_WIDTH - 16, break_long_words=False, break_on_hyphens=False) or [
        ""
    ]
    out = [f"  {label:<13} {body[0]}"]
    out.extend(f"  {'':<13} {line}" for line in body[1:])
    return out


def render_explanation(explanation: Explanation, catalog: Catalog | None = None) -> str:
    """``explanation`` as text: what each message means per the runtime's code, what
    triggers it, what the operator sees, the fix, the predicting check, and, when a
    preflight ran, the finding that is the actual cause."""
    catalog = catalog or load_catalog()
    lines: list[str] = []
    rep = explanation.report
    if rep is not None and not explanation.recognized and rep.engines:
        # lines attributed to an engine, none explained: said plainly (exit status 1)
        lines.extend(render_overview(explanation, catalog))
        lines.append("")
        lines.extend(_not_explained(explanation, catalog))
        return "\n".join(lines)
    if rep is None or not explanation.recognized:
        for f in explanation.foreign:
            where = f"line {f.first_line}" if f.first_line == f.last_line else f"lines {f.first_line}..{f.last_line}"
            lines.append(f"{f.name}: x{f.count}, first/last {where}")
            lines.extend(_para("text:", f.example))
            lines.extend(_para("meaning:", f.meaning))
        if explanation.foreign and not explanation.hits:
            return "\n".join(lines)
        if explanation.foreign:
            lines.append("")
    else:
        lines.extend(render_overview(explanation, catalog))
        if not explanation.hits:
            return "\n".join(lines)
        lines.append("")
    if not explanation.recognized:
        lines.append(
            f"not recognized: nothing in the {explanation.source} matched a message of kvcheck's catalog "
            f"({catalog.runtime}, {len(catalog.entries)} messages), a known failure signature or a general rule."
        )
        lines.append(
            "  Pass the whole log, from before the failure (the first error is often far above the last lines), "
            "and the peer's log too; 'kvcheck explain --list' shows what is known."
            if str(explanation.source).startswith("log ")
            else "  Paste the exception line ('Type: message') or pass the whole log with --log FILE (or pipe it: "
            "... | kvcheck explain -); 'kvcheck explain --list' shows what is known."
        )
        return "\n".join(lines)
    # the catalog restates one release's code; the release the text is explained against
    # may be another: said, so the two never read as contradicting each other
    other = (
        f" (kvcheck's catalog is written from that release's code; for SGLang {explanation.release}, the release "
        f"this text is explained against, each message's 'SGLang {explanation.release}:' line says whether it exists "
        "and is reachable there)"
        if explanation.release and f"sglang {explanation.release}" != catalog.runtime
        else ""
    )
    if all(h.match == "id" for h in explanation.hits):
        lines.append(
            f"catalog entry {', '.join(h.entry_id for h in explanation.hits)}, explained from {catalog.runtime}'s "
            f"code{other}"
        )
    else:
        lines.append(
            f"recognized {len(explanation.hits)} message(s) in the {explanation.source} ({explanation.lines} "
            f"line(s)), explained from {catalog.runtime}'s code{other}"
        )
    refused = refused_values(rep.findings, catalog) if rep is not None else set()
    for hit in explanation.hits:
        e = catalog.get(hit.entry_id)
        lines.append("")
        if hit.match == "id":
            lines.append(
                f"{e.id}  [{e.severity}] {e.type}  ({e.process}, {when_words(e.when)})  catalog entry, looked up by id"
            )
        else:
            where = (
                f"line {hit.first_line}"
                if hit.first_line == hit.last_line
                else f"lines {hit.first_line}..{hit.last_line}"
            )
            head = f"{e.id}  [{e.severity}] {e.type}  ({e.process}, {when_words(e.when)})"
            lines.append(f"{head}  x{hit.count}, first/last {where}")
        if hit.match == "partial":
            lines.append("  (partial match: only part of the message was found)")
        elif hit.match == "opening":
            lines.append(
                "  (opening only, lower confidence: the text is this message's first words and nothing more; no "
                "other message kvcheck has read starts so, but one of a release or project it has not read may)"
            )
        if hit.release_info is not None:
            lines.extend(
                _para(
                    f"SGLang {explanation.release}:",
                    f"{hit.release_info['text']} (release from {explanation.release_source})",
                )
            )
        if not e.reachable and (explanation.release is None or f"sglang {explanation.release}" == catalog.runtime):
            lines.append(
                f"  NOT REACHABLE in {catalog.runtime}: the process printing this is not running {catalog.runtime}'s "
                "code path (a different or patched build)."
            )
        lines.extend(_para("template:" if hit.match == "id" else "text:", hit.text))
        if hit.values:
            lines.extend(_para("values:", ", ".join(f"{k}={v}" for k, v in hit.values.items())))
        lines.extend(_para("meaning:", e.meaning))
        lines.extend(_para("triggered by:", e.triggers))
        lines.extend(_para("you see:", e.operator_sees))
        lines.extend(_fix_lines(e.fix, refused))
        lines.extend(_para("predicted by:", predicted_by(e.check)))
        for path, n, text in _config_lines(explanation, e, hit):
            lines.extend(_para("change:", f"{path}:{n}: {text}"))
        if explanation.preflight is not None:
            if hit.cause:
                c = hit.cause
                lines.extend(_para("your configs:", f"finding {c['finding']}: {c['message']} -- fix: {c['fix']}"))
            else:
                lines.extend(
                    _para(
                        "your configs:",
                        "the preflight of the given configs does not predict this message; the running servers may "
                        "not match these configs, or no check covers it.",
                    )
                )
    if explanation.preflight is not None:
        lines.append("")
        lines.append(f"preflight of the given configs: {explanation.preflight['verdict']}")
    return "\n".join(lines)


def _not_explained(explanation: Explanation, catalog: Catalog) -> list[str]:
    """The plain statement for a text whose lines kvcheck attributes but does not explain."""
    names = ", ".join(explanation.attributed_only) or "no engine"
    return [
        f"not explained: kvcheck names whose lines these are ({names}), but no catalog "
        f"message ({catalog.runtime}, {len(catalog.entries)} messages), known signature or general rule of kvcheck "
        "explains them (exit status 1).",
        "  Pass the whole log (--log FILE) for the lines around it; 'kvcheck explain --list' shows the SGLang "
        "messages kvcheck knows.",
    ]


PHASE_WORDS = {
    "startup": "at start-up",
    "first-request": "on the first request",
    # SGLang 0.5.23: the decode's receiver registers its KV args with a prefill rank once,
    # on the first request it routes to that rank (CommonKVReceiver.init ->
    # _setup_bootstrap_infos -> _register_kv_args, common/conn.py); the prefill's bootstrap
    # thread takes the registration (NixlKVManager._start_bootstrap_thread, room "None")
    # and decides the transfer there (_add_remote_peer -> _prepare_payload_xfer, nixl/conn.py)
    "decode-registration": "at decode registration (the decode's first request to this prefill rank, on the "
    "prefill's bootstrap thread)",
    "first-transfer": "on the first KV transfer",
    "serving": "during serving",
    "after-peer-restart": "after a peer restart or loss",
    "shutdown": "at shutdown",
}
# a catalog message's own phase said without the log (``Entry.when`` -> words): what the
# message tells of itself, so a transfer message is "on a KV transfer", not the first one
_MESSAGE_PHASE_WORDS = {**PHASE_WORDS, "first-transfer": "on a KV transfer"}


def phase_words(phase: str, phase_from: str = "message", shown: bool = True) -> str:
    """The words for a phase key (``reading.Finding.phase``): from the message itself
    (``phase_from`` ``message``) or from the log's own milestones (``log``); ``shown``: False
    when the log shows no event (start-up, request, restart) at or before the finding, so a
    phase is the message's own, never the log's, and none is 'phase not shown in the log'."""
    if phase_from == "log":
        return PHASE_WORDS.get(phase, "phase not shown") + " (from the log)"
    if not shown:
        if phase in _MESSAGE_PHASE_WORDS:
            return f"{_MESSAGE_PHASE_WORDS[phase]} (what the failure itself shows; the log shows no event before it)"
        return "phase not shown in the log"
    return _MESSAGE_PHASE_WORDS.get(phase, "phase not shown")


def when_words(when: str) -> str:
    """A catalog entry's ``when`` in the words the first-cause line uses for it."""
    from kvcheck.explain.reading import _PHASE_WORDS

    key = _PHASE_WORDS.get(when.split(" (")[0].strip())
    return phase_words(key) if key else when


def render_overview(explanation: Explanation, catalog: Catalog) -> list[str]:
    """The whole-log reading: engines and processes, the release, the phases shown, the
    first cause and what followed."""
    rep = explanation.report
    out = [f"read {explanation.lines} line(s) of the {explanation.source}"]
    # engines some finding that says more than the line's words is about (its text or its process)
    explained = {x for f in rep.findings if f.explains for x in (f.engine, f.host) if x}
    if explanation.hits:
        explained.add("sglang")
    if rep.engines:
        out.append("  lines by engine:")
        for e in rep.engines:
            where = f"line {e.first_line}" if e.first_line == e.last_line else f"lines {e.first_line}..{e.last_line}"
            procs = ", ".join(f"{k} {v}" for k, v in sorted(e.processes.items()))
            out.append(f"    {e.name}: {e.count} ({where}){' - ' + procs if procs else ''}")
            if e.engine != "sglang" and e.support:
                out.extend("      " + ln for ln in textwrap.wrap(e.support, width=_WIDTH - 6))
            if e.engine not in ("sglang", "python", "native") and e.engine not in explained:
                out.append("      named, not explained: no signature, rule or message of kvcheck reads these lines")
    rel = rep.release.text()
    out.append(
        f"  SGLang release shown: {rel}"
        + (
            f"; messages explained against {explanation.release} ({explanation.release_source})"
            if explanation.release
            else ""
        )
    )
    if rep.timeline:
        out.append("  phases shown: " + ", ".join(f"{t['kind']} (line {t['line']})" for t in rep.timeline[:8]))
    f = rep.first_cause
    if f is None:
        return out
    refused = refused_values(rep.findings, catalog)
    configs = getattr(explanation, "configs", None) or {}
    out.append("")
    if f.role == "consequence":
        out.append(f"no first cause in this text: line {f.first_line} is a consequence ({f.title}).")
        out.extend(_para("look at:", "; ".join(f.checks) or "the peer's log at the same time"))
    else:
        whose = f"{ENGINE_LABEL.get(f.engine, f.engine)}" + (
            f" in a {ENGINE_LABEL.get(f.host, f.host)} process"
            if f.host and f.host != f.engine
            else (", the process that printed it not shown" if not f.host and f.engine != "sglang" else "")
        )
        proc = f", {f.process}" if f.process else ""
        phase = phase_words(f.phase, f.phase_from, f.phase_shown)
        out.append(f"first cause: line {f.first_line} [{whose}{proc}, {phase}]: {f.title}")
        out.extend(_para("text:", f.text))
        if f.kind == "generic":  # a general rule: no specific signature knows this text
            comp = f.values.get("component", "")
            out.extend(
                _para(
                    "where:",
                    comp
                    if "index of fixed bugs" in comp
                    else comp + " (general rule: kvcheck has no specific signature for this text)",
                )
            )
        out.extend(_para("cause:", f.cause))
        for c in f.checks:
            out.extend(_para("check:", c))
        if f.kind in ("signature", "generic") or f.values.get("fixed_bug"):
            out.extend(_fix_lines(f.fix, refused))
            for path, n, text in _first_cause_lines(configs, f):
                out.extend(_para("change:", f"{path}:{n}: {text}"))
            if f.predicted_by and not f.predicted_by.startswith("kvcheck agent"):
                out.extend(_para("predicted by:", predicted_by(f.predicted_by)))
        if f.issues:
            out.extend(_para("known issue:", ", ".join(f.issues)))
        if f.fixed_in:
            out.extend(_para("fixed in:", f.fixed_in))
        if f.predicted_by and f.kind == "signature":
            out.extend(_para("reproduce:", _command(f.predicted_by, f.process)))
        if f.followed_by:
            out.extend(_para("then:", f.followed_by))
    if rep.then:
        out.append("what followed:" if f.role != "consequence" else "also in the text:")
        for t in rep.then[:12]:
            tag = "" if t.role == "cause" else f" ({t.role})"
            out.append(f"  line {t.first_line}: {t.title}{tag}" + (f" x{t.count}" if t.count > 1 else ""))
    if rep.not_sglang:
        names = ", ".join(ENGINE_LABEL.get(n, n) for n in rep.not_sglang)
        out.append(
            f"not SGLang's: the {names} lines are named and matched to known signatures only; kvcheck does not model "
            f"{names}."
        )
    return out


ENGINE_LABEL = {
    "sglang": "SGLang",
    "nixl": "NIXL",
    "ucx": "UCX",
    "mooncake": "Mooncake",
    "vllm": "vLLM",
    "vllm-ascend": "vLLM-Ascend",
    "trtllm": "TensorRT-LLM",
    "lmcache": "LMCache",
    "dynamo": "Dynamo",
    "libfabric": "libfabric/EFA",
    "python": "Python",
    "mori": "MORI",
    "lightllm": "LightLLM",
    "sglang-router": "SGLang router",
    "vllm-omni": "vLLM-Omni",
    "xllm": "xLLM",
    "os": "the operating system",
    "rdma": "RDMA",
}


def _command(predicted: str, process: str) -> str:
    if predicted.startswith("kvcheck agent"):
        role = process if process in ("prefill", "decode") else "prefill"
        return (
            f"kvcheck agent --role {role} --config <{role} server args> --ttl 600   "
            f"({predicted[len('kvcheck agent') :].strip(' ()')}; on the failing node)"
        )
    return predicted


def _fix_lines(fix: str, refused: set[str]) -> list[str]:
    """``fix:`` without the alternatives the log shows refused, and ``not proposed:`` for those."""
    kept, dropped = consistent_fix(fix, refused)
    out = _para("fix:", kept) if kept else []
    if dropped:
        out += _para("not proposed:", f"{'; '.join(dropped)} (the log shows {', '.join(sorted(refused))} refused)")
    return out


def _first_cause_lines(configs: dict[str, str], f) -> list[tuple[str, int, str]]:
    """Lines of the given config files (``--prefill``/``--decode``/``-f``) that set the
    flags the first cause's fix or cause names, on the side that printed it when known."""
    if not configs:
        return []
    flags = flags_in(f.fix + " " + f.cause)
    if not flags:
        return []
    out: list[tuple[str, int, str]] = []
    for role, path in configs.items():
        if f.process in (role, "") or role not in ("prefill", "decode"):
            out.extend(flag_lines(path, flags))
    return out[:6]


def _config_lines(explanation: Explanation, entry, hit) -> list[tuple[str, int, str]]:
    """Lines of the given config files that set the flags the fix (or the predicting
    finding) names."""
    configs = getattr(explanation, "configs", None) or {}
    if not configs:
        return []
    text = entry.fix + " " + ((hit.cause or {}).get("fix") or "")
    flags = flags_in(text)
    if not flags:
        return []
    out = []
    for role, path in configs.items():
        if entry.process in (role, "both") or not entry.process or role not in ("prefill", "decode"):
            out.extend(flag_lines(path, flags))
    return out[:6]


def predicted_by(check_id: str | None) -> str:
    """The 'predicted by' line: the command documenting the predicting check
    (``kvcheck checks ID`` takes a check id or a finding id), and, for a finding id, the
    check that emits it."""
    if not check_id:
        return "no preflight check (kvcheck does not predict it)"
    from kvcheck.checks.ids import check_of as _check_of

    owner = _check_of(check_id)
    where = f" (finding {check_id} of check {owner})" if owner != check_id else ""
    return f"kvcheck checks {check_id}{where}"


LIST_FORMATS = ("table", "json")


def catalog_contract(catalog: Catalog | None = None) -> dict:
    """The catalog as plain data (``explain --list --format json``): the runtime, the
    number of messages, and per entry its id, message template, severity, type, process,
    when, the check id predicting it (``null``: none) and whether 0.5.23 can raise it."""
    catalog = catalog or load_catalog()
    return {
        "runtime": catalog.runtime,
        "count": len(catalog.entries),
        "entries": [
            {
                "id": e.id,
                "template": e.template,
                "severity": e.severity,
                "type": e.type,
                "process": e.process,
                "when": e.when,
                "check": e.check,
                "reachable": e.reachable,
            }
            for e in catalog.entries
        ],
    }


def render_catalog(format: str = "table", catalog: Catalog | None = None) -> str:
    """Every catalog entry. ``table``: one block per entry, its id, type, process and
    when, check id, then the message template; ``json``: ``catalog_contract``. Raises
    ``KvcheckError`` (exit 2) for another format."""
    catalog = catalog or load_catalog()
    if format == "json":
        return json.dumps(catalog_contract(catalog), indent=2)
    if format != "table":
        from kvcheck.errors import KvcheckError

        raise KvcheckError(f"unknown format {format!r}; choose {' or '.join(LIST_FORMATS)}", field="--format")
    out = [f"{len(catalog.entries)} messages of {catalog.runtime} (PD over NIXL); explain one with: kvcheck explain ID"]
    for e in catalog.entries:
        flag = "  (unreachable in 0.5.23)" if not e.reachable else ""
        out.append(f"  {e.id:<36} {e.type:<22} {e.process:<8} {e.when:<20} check: {e.check or '-'}{flag}")
        out.append(f"      {e.template.rstrip()}")
    return "\n".join(out)
