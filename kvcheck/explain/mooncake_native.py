"""Mooncake's native lines explained, not only named: the component that prints a line, the
phase its function runs in, the likely cause, what to check on the node and the fix in
Mooncake's own knobs (``mooncake_native.yaml``).

Read from Mooncake's source (kvcache-ai/Mooncake v0.3.0 .. v0.3.12.post1 and main, the
releases ``engine_formats.json.gz`` indexes): each source component (transfer engine core,
the RDMA context / endpoint / transport, TCP, NVLink, EFA, CXL, Ascend and vendor
transports, the segment metadata plugins and handshake, TENT, the store master and client)
with what its functions do (``TcpTransport::install``, ``RdmaEndPoint::doSetupConnection``,
``TransferMetadata::getSegmentDescByName`` ...), and the phase a function runs in by its name
(install / construct / register at start-up, openSegment / handshake on the first transfer
to a peer, submit / post / poll while serving, destroy / unregister at teardown).

A line matched whole by one of Mooncake's formats (``FormatMatch``), or a glog line of a
Mooncake file no format matched, gets:

- ``place``: the component (by the format's module path, else the file name) and the phase
  (by the function, else the component's);
- ``family``: a failure class read from the message's words (a port taken, an address that
  does not resolve, a peer that does not answer, metadata, a segment not found, the
  handshake, the RoCE GID, the MTU, memory registration, the RDMA device, a timeout), with
  the component's own mechanism where its source shows one (the TCP transport's
  ``rpc_port + 1`` up to v0.3.4.post2);
- the releases of Mooncake that print the message and, where they are not all of them, the
  release where the code that prints it changed.

yalantinglibs (coro_rpc, coro_http, coro_io, asio), which Mooncake links for mooncake_master's
RPC and HTTP servers, the store client's connection to the master and the transfer engine's
RPC, prints lines of its own (``[coro_http_server.hpp:725] bad address: 0.0.0.0 error: Host
not found (authoritative)``): ``rpc_line`` says them as Mooncake's RPC layer, with the cause
its ``listen`` / ``connect`` code gives (asio's resolver with ``address_configured``).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from kvcheck.explain.rulebase import GenericFinding

if TYPE_CHECKING:
    from kvcheck.explain.formats import FormatMatch


@functools.lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """``mooncake_native.yaml`` with its patterns compiled (cached)."""
    text = resources.files("kvcheck.explain").joinpath("mooncake_native.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for c in data["components"]:
        c["_path"] = re.compile(c["path"])
        c["_phases"] = [(re.compile(k), v) for k, v in (c.get("phases") or {}).items()]
    for f in data["families"]:
        f["_re"] = re.compile(f["re"])
    data["_rpc_files"] = re.compile(data["rpc_files"])
    for m in data["rpc_messages"]:
        m["_re"] = re.compile(m["re"])
    data["_by_id"] = {c["id"]: c for c in data["components"]}
    data["_families"] = {f["id"]: f for f in data["families"]}
    return data


def place(path: str, function: str = "") -> tuple[dict[str, Any], str] | None:
    """(component, phase) of a Mooncake source ``path`` (a format's module path, or the file
    name a glog line shows) and the ``function`` that prints the line: the phase the
    function's name says (``install`` -> startup, ``openSegment`` -> first-transfer,
    ``submitTransfer`` -> serving, ``deconstruct`` -> teardown), else the component's. None
    when the path is no component's."""
    for c in table()["components"]:
        if c["_path"].search(path):
            fn = function.split("::")[-1] if function else ""
            for rx, ph in c["_phases"]:
                if fn and rx.search(fn):
                    return c, ph
            return c, c["phase"]
    return None


def family(text: str) -> dict[str, Any] | None:
    """The failure family a message's words name (the first in ``families`` whose pattern
    the message text matches; never the function's name, which says the step, not what
    failed), or None."""
    for f in table()["families"]:
        if f["_re"].search(text):
            return f
    return None


def _changed(fm: FormatMatch) -> str:
    """Where the releases that print the message start or stop before the scanned ones do:
    the release that changed the code printing it."""
    rel, every = fm.releases, fm.all_releases
    if not rel or rel == every:
        return ""
    out = []
    if rel[0] != every[0]:
        out.append(f"the message first appears in {rel[0]}")
    if rel[-1] != every[-1] and rel[-1] in every:
        nxt = every[every.index(rel[-1]) + 1]
        out.append(f"{nxt} no longer prints it (the code was changed there)")
    return " (" + "; ".join(out) + ")" if out else ""


def explain(
    lineno: int,
    line: str,
    text: str,
    fm: FormatMatch | None = None,
    file: str = "",
    os_cause: str = "",
) -> GenericFinding | None:
    """A Mooncake line explained by its component, phase and failure family. ``fm``: its
    format (None for a glog line of a Mooncake file no format matched: ``file`` names the
    file); ``text``: the message; ``os_cause``: what an OS error the line carries means
    (``errorlogs._errno_finding``'s words). None when the file is no component's."""
    path = fm.module if fm is not None else file
    function = fm.function if fm is not None else ""
    got = place(path, function)
    if fm is not None and file and file != fm.module.rsplit("/", 1)[-1]:
        # the line's own prefix names another file that prints the same words (one text in
        # several transports): the file that printed it is its component
        own = place(file)
        if own is not None:
            got, function = own, ""
    if got is None:
        return None
    if not os_cause:
        from kvcheck.explain.native import status_meaning

        code, meaning = status_meaning(text)
        os_cause = f"{code}: {meaning}" if meaning else ""
    comp, phase = got
    fam = family(text)
    where = (
        (fm.where() if not file or file == fm.module.rsplit("/", 1)[-1] else f"{file} (its words as {fm.where()})")
        if fm is not None
        else file
    )
    span = ""
    if fm is not None:
        span = f"; Mooncake releases with this message: {fm.span(fm.all_releases)}{_changed(fm)}"
    does = f"What it does there: {comp['does']}."
    said = f"Mooncake prints it in {where} ({comp['name']}){span}."
    osx = f" The status in the line: {os_cause}." if os_cause else ""
    component = comp["name"] + (f", {function}" if function else "")
    if fam is not None:
        mech = (fam.get("by_component") or {}).get(comp["id"])
        cause = (mech or fam["cause"].format(component=comp["name"])) + osx + " " + said + " " + does
        phase = fam.get("phase") or phase
        return GenericFinding(
            id=fam["id"],
            title=f"Mooncake {comp['name'].removeprefix('Mooncake ')}: {fam['title']}",
            engine="mooncake",
            line=lineno,
            phase=phase,
            component=component,
            text=line.strip()[:300],
            role=fam.get("role", "cause"),
            cause=cause,
            checks=list(fam["checks"]) + [c for c in comp["checks"] if c not in fam["checks"]][:1],
            fix=fam["fix"],
        )
    # no family: the component's step and its likely causes
    short = text.strip()[:200]
    return GenericFinding(
        id="mooncake-error-log-generic" if fm is not None else "native-error-generic",
        title=f"Mooncake error in {comp['name']}" + (f" ({function})" if function else "") + f": {short[:100]}",
        engine="mooncake",
        line=lineno,
        phase=phase,
        component=component,
        text=line.strip()[:300],
        cause=f"Mooncake's own message: {short}.{osx} {said} {does} A failure in that step is most often that "
        f"{comp['causes']}.",
        checks=list(comp["checks"]),
        fix=comp["fix"],
    )


# a yalantinglibs/easylog line (``2026-07-09 21:40:35.397501 ERROR [12449] [coro_http_server.hpp:725] msg``)
_RPC_LINE = re.compile(
    r"(?:(?P<lvl>ERROR|WARN|WARNING|INFO|CRITICAL|FATAL)\s+(?:\[\d+\]\s+)?)?\[(?P<file>[\w.]+\.(?:hpp|h|cpp)):\d+\]\s*(?P<text>.*)"
)
_ASIO_ERRORS = {
    "Host not found (authoritative)": "the resolver has no address for the name (for a literal: the host has no "
    "address of that family configured, with AI_ADDRCONFIG)",
    "Host not found (non-authoritative), try again later": "the resolver could not reach DNS in time",
    "Service not found": "getaddrinfo could not resolve the host and port given (EAI_SERVICE / EAI_NONAME as asio "
    "reports "
    "them: a service name the resolver does not know, as a Kubernetes name outside its namespace in Mooncake#1195)",
    "Connection refused": "nothing listens at that address and port",
    "Address already in use": "another process holds the port",
    "Cannot assign requested address": "the address is not one of this host's",
}


def rpc_line(lineno: int, s: str) -> GenericFinding | None:
    """A yalantinglibs line (coro_rpc / coro_http / coro_io, ``rpc_files``) of a Mooncake
    process, explained as Mooncake's RPC layer: the yalantinglibs function that prints it,
    which Mooncake server or client runs on it, and the family its message names."""
    if ".hpp:" not in s and ".h:" not in s and ".cpp:" not in s:
        return None
    m = _RPC_LINE.search(s)
    if m is None or not table()["_rpc_files"].match(m.group("file")):
        return None
    text = m.group("text").strip()
    row = next((r for r in table()["rpc_messages"] if r["_re"].search(text)), None)
    if row is None:
        if (m.group("lvl") or "") not in ("ERROR", "CRITICAL", "FATAL"):
            return None
        row = {"family": "", "where": f"yalantinglibs {m.group('file')}", "server": "Mooncake's RPC layer"}
    fam = table()["_families"].get(row["family"]) if row["family"] else family(text)
    asio = next((f"{k}: {v}" for k, v in _ASIO_ERRORS.items() if k in text), "")
    said = (
        f"yalantinglibs prints it in {row['where']}; in a Mooncake process that is {row['server']} (Mooncake links "
        "yalantinglibs for mooncake_master's RPC and HTTP servers, the store client's connection to the master and "
        "the transfer engine's RPC)."
    )
    if asio:
        said += f" asio's error: {asio}."
    base = dict(
        engine="mooncake",
        line=lineno,
        component=f"Mooncake RPC layer (yalantinglibs {m.group('file')})",
        text=s.strip()[:300],
    )
    if fam is None:
        return GenericFinding(
            id="mooncake-rpc-error-generic",
            title=f"Mooncake RPC layer (yalantinglibs) error: {text[:120]}",
            phase="",
            cause=f"yalantinglibs reported: {text[:200]}. {said}",
            checks=[
                "which Mooncake process printed it (mooncake_master, a store client, a transfer engine) and the "
                "address and port it was given",
                "ss -ltnp on that host",
            ],
            fix="Give the Mooncake server or client an address and port it can use (the master's --rpc_address / "
            "--port / --metrics_port, the engine's local_hostname / MC_TCP_BIND_ADDRESS).",
            **base,  # type: ignore[arg-type]
        )
    mech = (fam.get("by_component") or {}).get("rpc") or fam["cause"].format(component="Mooncake RPC layer")
    listen = "listen" in row["where"]
    return GenericFinding(
        id=fam["id"],
        title=f"Mooncake RPC layer (yalantinglibs): {fam['title']}",
        phase="startup" if listen else (fam.get("phase") or ""),
        cause=f"{mech} {said}",
        checks=list(fam["checks"]),
        fix=fam["fix"],
        role=fam.get("role", "cause"),
        **base,  # type: ignore[arg-type]
    )


def in_sglang(finding_id: str) -> str:
    """What sets a family's Mooncake setting when the process is an SGLang server (its
    ``sglang`` text, ' '-prefixed), '' for none: SGLang 0.5.23's
    ``MooncakeTransferEngine.initialize`` passes the hostname SGLANG_HOST_IP / HOST_IP (else
    the address ``get_local_ip_auto`` detects), the protocol MOONCAKE_PROTOCOL and the device
    list ``--disaggregation-ib-device`` (``kv_args.ib_device``)."""
    if finding_id.startswith("rdma-wc-"):  # a work completion in error on a Mooncake NIC pair
        finding_id = "mooncake-rdma-device-unusable"
    fam = table()["_families"].get(finding_id)
    return " " + fam["sglang"] if fam is not None and fam.get("sglang") else ""
