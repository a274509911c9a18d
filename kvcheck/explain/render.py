"""Print an ``Explanation`` for a person (plain text, one block per recognized message)."""

from __future__ import annotations

import json
import textwrap

from kvcheck.explain.catalog import Catalog, load_catalog
from kvcheck.explain.matcher import Explanation

_WIDTH = 100


def _para(label: str, text: str) -> list[str]:
    body = textwrap.wrap(" ".join(text.split()), width=_WIDTH - 16) or [""]
    out = [f"  {label:<13} {body[0]}"]
    out.extend(f"  {'':<13} {line}" for line in body[1:])
    return out


def render_explanation(explanation: Explanation, catalog: Catalog | None = None) -> str:
    """``explanation`` as text: what each message means per the runtime's code, what
    triggers it, what the operator sees, the fix, the predicting check, and, when a
    preflight ran, the finding that is the actual cause."""
    catalog = catalog or load_catalog()
    lines: list[str] = []
    for f in explanation.foreign:
        where = f"line {f.first_line}" if f.first_line == f.last_line else f"lines {f.first_line}..{f.last_line}"
        lines.append(f"{f.name}: x{f.count}, first/last {where}")
        lines.extend(_para("text:", f.example))
        lines.extend(_para("meaning:", f.meaning))
    if explanation.foreign and not explanation.hits:
        return "\n".join(lines)
    if explanation.foreign:
        lines.append("")
    if not explanation.recognized:
        lines.append(f"not recognized: no {catalog.runtime} PD/NIXL message from kvcheck's catalog ({len(catalog.entries)} messages) was found in the {explanation.source}.")
        lines.append("  Paste the exception line ('Type: message') or pass the whole log with --log FILE; 'kvcheck explain --list' shows what is known.")
        return "\n".join(lines)
    if all(h.match == "id" for h in explanation.hits):
        lines.append(f"catalog entry {', '.join(h.entry_id for h in explanation.hits)}, explained from {catalog.runtime}'s code")
    else:
        lines.append(f"recognized {len(explanation.hits)} message(s) in the {explanation.source} ({explanation.lines} line(s)), explained from {catalog.runtime}'s code")
    for hit in explanation.hits:
        e = catalog.get(hit.entry_id)
        lines.append("")
        if hit.match == "id":
            lines.append(f"{e.id}  [{e.severity}] {e.type}  ({e.process}, {e.when})  catalog entry, looked up by id")
        else:
            where = f"line {hit.first_line}" if hit.first_line == hit.last_line else f"lines {hit.first_line}..{hit.last_line}"
            lines.append(f"{e.id}  [{e.severity}] {e.type}  ({e.process}, {e.when})  x{hit.count}, first/last {where}")
        if hit.match == "partial":
            lines.append("  (partial match: only part of the message was found)")
        if hit.release_info is not None:
            lines.extend(_para(f"SGLang {explanation.release}:", f"{hit.release_info['text']} (release from {explanation.release_source})"))
        if not e.reachable:
            lines.append(f"  NOT REACHABLE in {catalog.runtime}: the process printing this is not running {catalog.runtime}'s code path (a different or patched build).")
        lines.extend(_para("template:" if hit.match == "id" else "text:", hit.text))
        if hit.values:
            lines.extend(_para("values:", ", ".join(f"{k}={v}" for k, v in hit.values.items())))
        lines.extend(_para("meaning:", e.meaning))
        lines.extend(_para("triggered by:", e.triggers))
        lines.extend(_para("you see:", e.operator_sees))
        lines.extend(_para("fix:", e.fix))
        lines.extend(_para("predicted by:", predicted_by(e.check)))
        if explanation.preflight is not None:
            if hit.cause:
                c = hit.cause
                lines.extend(_para("your configs:", f"finding {c['finding']}: {c['message']} -- fix: {c['fix']}"))
            else:
                lines.extend(_para("your configs:", "the preflight of the given configs does not predict this message; the running servers may not match these configs, or no check covers it."))
    if explanation.preflight is not None:
        lines.append("")
        lines.append(f"preflight of the given configs: {explanation.preflight['verdict']}")
    return "\n".join(lines)


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
