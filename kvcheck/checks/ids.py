"""Every finding id kvcheck emits, and the check that owns it (one registry).

A check's own id is a finding id; ``FINDING_IDS`` lists the other ids a check emits
(``check -> [ids]``). Cluster checks (``kvcheck.cluster.checks.CLUSTER_CHECKS``) and the
pipeline's own findings are registered here too, so that ``--ignore``, ``kvcheck checks``,
JUnit grouping and ``explain`` all read one table. ``check_of(finding_id)`` is the public
lookup (``kvcheck.preflight._check_of`` is kept as an alias).
"""

from __future__ import annotations

from kvcheck.sglang import plan as builtin
from kvcheck.sglang.startup import REFUSAL_IDS as STARTUP_REFUSAL_IDS

# Finding ids that a check may emit beside its own id (for --ignore and the docs).
FINDING_IDS = {
    "bootstrap": list(builtin.BOOTSTRAP_CHECK_IDS),
    "startup": list(STARTUP_REFUSAL_IDS) + ["startup-unchecked", "startup-gpu-dependent", "prefill-dcp-warning", "startup-argparse", "pair-not-checked"],
    "transfer-decision": ["head-slice-assert", "region-count", "hisparse-decode-only-spec", "hetero-tp-direct-to-host", "hetero-tp-mixed-kinds", "dcp-mixed-kinds", "dcp-topology", "dcp-geometry", "item-stride", "pp-layer-pairing", "source-mixed-kinds", "head-slice-overrun", "runtime-error"],
    "connector-startup": ["connector-startup", "staging-mla", "staging-chunk-size", "nixl-ib-device", "decode-host-destination", "minimax-index-value"],
    "startup-log": ["decode-radix-disabled"],
    # The pipeline's own findings (kvcheck.cluster.pipeline / decide).
    "pipeline": ["unresolved-variable", "unknown-model", "unknown-gpu", "backend-not-modeled", "deployment-problem",
                 "release-window", "release-clues-disagree", "not-disaggregated", "env-from"],
    "agents": ["agent-geometry", "agent-no-common-backend", "agent-register-failed", "agent-alloc-failed", "agent-vram-untested", "agent-publish-failed"],
    "probe": [
        "probe-unreachable", "probe-timeout", "probe-peer-lost", "probe-no-common-backend", "probe-remote-unregistered",
        "probe-remote-kind", "probe-data-mismatch", "probe-registration-failed", "probe-tcp-fallback", "probe-error",
        "probe-not-kvcheck", "probe-skipped", "probe-peer-restarted", "probe-unconfirmed", "probe-unconfirmed-region",
    ],
}


def all_finding_ids() -> list[str]:
    """Every id a check emits beside its own."""
    return [i for ids in FINDING_IDS.values() for i in ids]


def check_of(finding_id: str) -> str:
    """The check that emits ``finding_id`` (itself when it is a check's own id)."""
    for chk, ids in FINDING_IDS.items():
        if finding_id in ids:
            return chk
    return finding_id


def apply_ignore(findings, ignore) -> None:
    """Mark every finding whose id, or whose check's id, is in ``ignore`` as ignored (the
    one place ``--ignore`` is applied: pair, start-up, cluster, live-agent, probe)."""
    ignore = set(ignore)
    if not ignore:
        return
    for f in findings:
        if f.id in ignore or check_of(f.id) in ignore:
            f.ignored = True
