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
    what="A kvcheck agent (kvcheck agent) whose registered regions, memory kinds or backends differ from the "
    "geometry derived from the args, or that could not register a memory kind.",
    why="The runtime registers the same regions with the same NIXL version, backend and UCX environment; a kind that "
    "cannot be registered here fails the server with 'NIXL memory registration failed for {kind} kv tensors'.",
    fix="Start the agent with the server's own config and environment; fix the node (GPU driver, ulimit -l, UCX "
    "memory types) when a kind cannot be registered.",
)
def agents(chk, ctx: CheckContext) -> list[Finding]:
    return []


@check(
    "probe",
    Severity.ERROR,
    "A real NIXL transfer moves bytes along every segment",
    what=(
        "The probe (--probe): the decode agent's regions confirmed with the agent itself (nonce over kvcheck's "
        "listener, a record read back over NIXL), "
        "then per segment of the plan a prepared descriptor-list WRITE strictly inside confirmed regions, a "
        "notification, and a READ-back compare, each with a deadline. "
        "Ids: probe-unconfirmed-region (metadata names memory the agent did not allocate: nothing written), "
        "probe-unconfirmed (saved blob, stale or altered etcd entry, "
        "a listener that is not the agent), probe-not-kvcheck, probe-peer-lost (died mid-probe), "
        "probe-peer-restarted (new process or metadata), "
        "probe-timeout (stopped answering: exit 3), probe-no-common-backend, probe-remote-unregistered, "
        "probe-remote-kind, probe-data-mismatch."
    ),
    why=(
        "Registration alone does not prove the fabric moves bytes between these nodes (transport, device list, "
        "firewall, a frozen or restarted peer); "
        "and a NIXL WRITE goes wherever the metadata points, so metadata from a file or etcd is never written to "
        "unless the live agent confirms it."
    ),
    fix="See the finding: each names the step that failed and its fix.",
)
def probe(chk, ctx: CheckContext) -> list[Finding]:
    return []
