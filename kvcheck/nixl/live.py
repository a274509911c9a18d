"""Live agent metadata against the geometry derived from args.

``remote_regions`` recovers a kvcheck agent's region order from its blob alone (see the
layout conventions in ``kvcheck.nixl.agent``); ``compare_geometry`` turns a disagreement
between an agent and the args into findings.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.checks.base import Finding, Severity
from kvcheck.nixl.agent import CONFIRM_DEV_ID, decode_dev_id
from kvcheck.nixl.blob import AgentMetadata


@dataclass
class RemoteRegion:
    """A remote region in registration order: the runtime ``kind`` (VRAM for a stand-in),
    the kind NIXL registered (``reg_kind``), ``addr``, ``length`` (bytes), ``dev_id``."""

    index: int
    kind: str
    reg_kind: str
    addr: int
    length: int
    dev_id: int
    standin: bool


def remote_regions(meta: AgentMetadata, backend: str = "UCX") -> list[RemoteRegion]:
    """The agent's regions in registration order.

    kvcheck DRAM regions carry their index in the device id; any other region (real
    VRAM, a foreign agent's DRAM) takes the free indices in (kind, address) order. A
    kvcheck agent's confirmation page (``CONFIRM_DEV_ID``) is not a region and is skipped.
    """
    tagged: dict[int, RemoteRegion] = {}
    untagged: list[RemoteRegion] = []
    for sec in meta.sections:
        if sec.backend != backend:
            continue
        for r in sorted(sec.regions, key=lambda r: r.addr):
            if sec.kind == "DRAM" and r.dev_id == CONFIRM_DEV_ID:
                continue  # a kvcheck agent's confirmation page, not a KV region
            tag = decode_dev_id(r.dev_id) if sec.kind == "DRAM" else None
            if tag is not None and tag[0] not in tagged:
                idx, standin = tag
                tagged[idx] = RemoteRegion(
                    idx, "VRAM" if standin else "DRAM", sec.kind, r.addr, r.length, r.dev_id, standin
                )
            else:
                untagged.append(RemoteRegion(-1, sec.kind, sec.kind, r.addr, r.length, r.dev_id, False))
    total = len(tagged) + len(untagged)
    free = [i for i in range(total) if i not in tagged]
    for i, rr in zip(free, untagged, strict=False):
        rr.index = i
        tagged[i] = rr
    return [tagged[i] for i in sorted(tagged)]


def compare_geometry(
    meta: AgentMetadata, geometry, role: str, source: str, backend: str = "UCX"
) -> tuple[list[Finding], dict]:
    """Compare an agent's live regions with ``geometry`` (``SideGeometry``) for ``role``.

    Returns (findings, summary). A count or kind disagreement is an ``agent-geometry``
    error: the runtime's decision would be taken on the live values, not the args.
    A region shorter than one page of the derived item length is an error too.
    """
    live = remote_regions(meta, backend)
    live_kinds = [r.kind for r in live]
    counts = {k: live_kinds.count(k) for k in dict.fromkeys(live_kinds)}
    summary = {
        "source": source,
        "name": meta.name,
        "backends": list(meta.backends),
        "n_regions": len(live),
        "kinds": counts,
        "standins": sum(1 for r in live if r.standin),
    }
    findings: list[Finding] = []
    fix = (
        f"start the {role}-role agent with the same server config as the {role} server (kvcheck agent --role {role} "
        "--config FILE), "
        f"or correct the {role} args given to preflight"
    )
    if backend not in meta.backends:
        findings.append(
            Finding(
                id="agent-no-common-backend",
                severity=Severity.ERROR,
                message=f"{role} agent {meta.name!r} ({source}) offers backends {sorted(meta.backends)}, not {backend}",
                fix=f"start the agent with --backend {backend} (SGLANG_DISAGGREGATION_NIXL_BACKEND must match on "
                "both sides)",
            )
        )
        return findings, summary
    if geometry is None:
        return findings, summary
    derived = geometry.kinds
    if len(live) != len(derived) or live_kinds != derived:
        dcounts = {k: derived.count(k) for k in dict.fromkeys(derived)}
        findings.append(
            Finding(
                id="agent-geometry",
                severity=Severity.ERROR,
                message=f"{role} agent {meta.name!r} registered {len(live)} regions {counts}; the args give "
                f"{len(derived)} {dcounts}",
                fix=fix,
            )
        )
    else:
        pages = None
        for r, item in zip(live, geometry.item_lens, strict=False):
            if item and r.length < item:
                findings.append(
                    Finding(
                        id="agent-geometry",
                        severity=Severity.ERROR,
                        message=f"{role} agent region {r.index} is {r.length} bytes, less than one {item}-byte page",
                        fix=fix,
                    )
                )
                break
            if item:
                pages = r.length // item if pages is None else min(pages, r.length // item)
        summary["pages"] = pages
    if summary["standins"]:
        findings.append(
            Finding(
                id="agent-vram-untested",
                severity=Severity.INFO,
                message=f"{role} agent {meta.name!r}: {summary['standins']} VRAM region(s) are DRAM stand-ins (no "
                "GPU on that host)",
                fix="run the agent on the GPU node with torch or cupy installed to test VRAM registration",
            )
        )
    return findings, summary
