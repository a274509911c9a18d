"""Live NIXL checks: documentation and ids only.

Their findings come from ``kvcheck.nixl`` (``--prefill-agent/--decode-agent`` and
``--probe``), which runs real NIXL agents; the static path never imports it, so these
registered checks return nothing on their own.
"""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check


@check(
    "agents",
    Severity.ERROR,
    "Live NIXL agents registered what the args say",
    what="A kvcheck agent (kvcheck agent) whose registered regions, memory kinds or backends differ from the geometry derived from the args, or that could not register a memory kind.",
    why="The runtime registers the same regions with the same NIXL version, backend and UCX environment; a kind that cannot be registered here fails the server with 'NIXL memory registration failed for {kind} kv tensors'.",
    fix="Start the agent with the server's own config and environment; fix the node (GPU driver, ulimit -l, UCX memory types) when a kind cannot be registered.",
)
def agents(chk, ctx: CheckContext) -> list[Finding]:
    return []


@check(
    "probe",
    Severity.ERROR,
    "A real NIXL transfer moves bytes along every segment",
    what="The probe (--probe): per segment of the plan, a prepared descriptor-list WRITE into a kvcheck decode agent, a notification, and a READ-back compare, each with a deadline.",
    why="Registration alone does not prove the fabric moves bytes between these nodes (transport, device list, firewall, a frozen or restarted peer).",
    fix="See the finding: each names the step that failed and its fix.",
)
def probe(chk, ctx: CheckContext) -> list[Finding]:
    return []
