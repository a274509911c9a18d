"""Every finding id kvcheck emits, and the check that owns it (one registry).

A check's own id is a finding id; ``FINDING_IDS`` lists the other ids a check emits
(``check -> [ids]``). Cluster checks (``kvcheck.cluster.checks.CLUSTER_CHECKS``) and the
pipeline's own findings are registered here too, so that ``--ignore``, ``kvcheck checks``,
JUnit grouping and ``explain`` all read one table. ``check_of(finding_id)`` is the public
lookup (``kvcheck.preflight._check_of`` is kept as an alias).
"""

from __future__ import annotations

from collections.abc import Iterable

from kvcheck.sglang import plan as builtin
from kvcheck.sglang.startup import REFUSAL_IDS as STARTUP_REFUSAL_IDS

# The pipeline's own findings (kvcheck.cluster.pipeline / decide / pair_input): documented
# here so that ``kvcheck checks ID`` answers for every id kvcheck prints.
PIPELINE_DOCS = {
    "unresolved-variable": (
        "unchecked",
        "A $VAR in a launch line or manifest that has no value.",
        "The flag's value, and so the pair, cannot be read.",
        "Give the variable a value (in the file, --env FILE, or kvcheck's environment).",
    ),
    "unknown-model": (
        "unchecked",
        "A model whose config.json kvcheck cannot read (not local, not in a Hugging Face cache, not in the catalog).",
        "The KV regions depend on the model's layers, heads and dtypes.",
        "Pass --model-config FILE or --models DIR.",
    ),
    "unknown-gpu": (
        "unchecked",
        "A GPU name kvcheck does not know.",
        "Page sizes, attention backends and KV dtypes are chosen by GPU.",
        "Pass --gpu NAME (h100, h200, b200, gb200, ... or smXX).",
    ),
    "deployment-problem": (
        "unchecked",
        "A part of the deployment the reader could not take as written.",
        "A pair may be missing or wrong.",
        "Fix the manifest line named, or check this part by hand.",
    ),
    "release-window": (
        "unchecked",
        "A pair whose SGLang release is not pinned, decided on every release its sides may run: unchecked when the "
        "answers differ (a per-release table), info when they agree.",
        "The PD path, start-up and flags change between releases; an assumed release would decide the verdict.",
        "Pin the image tag or pass --sglang-version.",
    ),
    "release-clues-disagree": (
        "warning",
        "Clues to a side's release (image tag, recipe pin, pip line, /server_info's version, --sglang-version) that "
        "name different releases.",
        "The strongest clue decides (a live server's own /server_info version, else --sglang-version, else the "
        "input's); the others may be stale.",
        "Make them name one release.",
    ),
    "gpu-clues-disagree": (
        "warning",
        "A GPU option (--gpu, --prefill-gpu, --decode-gpu) that names another GPU than the input does (a "
        "Kubernetes node selector, an srt-slurm gpu_type, a kvcheck-gpu key).",
        "The option decides; the input's GPU may be where the server really runs.",
        "Make the option and the input name one GPU.",
    ),
    "not-disaggregated": (
        "warning",
        "An SGLang server without --disaggregation-mode among PD servers.",
        "It takes no part in KV transfer.",
        "Add --disaggregation-mode prefill or decode if it serves PD traffic.",
    ),
    "env-from": (
        "warning",
        "A Kubernetes envFrom kvcheck cannot read (usually a Secret).",
        "Variables from it may change the transfer.",
        "Pass the variables with --env FILE.",
    ),
    "duplicate-key": (
        "warning",
        "A key written twice in one mapping of a YAML file read with PyYAML's rule, last value wins (an SGLang "
        "--config file: ConfigArgumentMerger's yaml.safe_load; an srt-slurm recipe; Helm values). A Kubernetes "
        "manifest or Compose file with one is refused instead (exit 2): kubectl and Compose refuse it.",
        "The earlier value is dropped without a word: the server runs with the later one, which kvcheck checks.",
        "Keep one of the two keys.",
    ),
    # What a deployment reader could not take as written (kvcheck.sources.deployments:
    # ``Problem``; the pipeline reports each under its own id).
    "config-not-read": (
        "unchecked",
        "A --config YAML named in a launch line that kvcheck cannot read: inside the image, outside the directory "
        "kvcheck may read, or not a YAML mapping of flags.",
        "The server args in it, and so that server, are not checked.",
        "Give kvcheck a copy (--config-file IMAGE_PATH=LOCAL_PATH), keep it beside the deployment file, or pass "
        "--root DIR holding both.",
    ),
    "config-refused": (
        "unchecked",
        "A --config YAML whose keys SGLang's config merger refuses (ConfigArgumentMerger, as the server's release "
        "merges the file).",
        "The server does not start with that file; its args are not checked.",
        "Fix the --config file as SGLang's message says.",
    ),
    "conditional-branches": (
        "unchecked",
        "A script whose if/case branches combine in more ways than kvcheck reads; the first combinations are read.",
        "The servers the other combinations start are not checked.",
        "Split the script per role, or check the remaining branches by hand.",
    ),
    "source-not-read": (
        "info",
        "A script's `source FILE` (or `. FILE`) that kvcheck could not read (missing, outside the read root, too "
        "large).",
        "The variables it sets stay unresolved: flags that use them are unresolved-variable findings.",
        "Give the sourced file with -f too (or keep it beside the script), or pass its variables with --env FILE.",
    ),
    "servers-not-read": (
        "unchecked",
        "A script with no SGLang launch line of its own that sources a file kvcheck could not read.",
        "The servers it may start from the sourced file are not checked.",
        "Give the sourced file with -f too, or pass --root DIR holding it, so its launch lines are read.",
    ),
    "unresolved-address": (
        "info",
        "An address, port or node-rank option whose value is filled in at run time (--host ${POD_IP}, --port "
        "$PORT, --node-rank $RANK).",
        "An address, port or rank shapes no KV transfer: it is checked only for agreement across an instance's nodes.",
        "Nothing to do; pass --env FILE with its value to have port clashes checked too.",
    ),
}

# Finding ids that a check may emit beside its own id (for --ignore and the docs).
FINDING_IDS = {
    "bootstrap": list(builtin.BOOTSTRAP_CHECK_IDS),
    "startup": list(STARTUP_REFUSAL_IDS)
    + ["startup-unchecked", "startup-gpu-dependent", "prefill-dcp-warning", "startup-argparse", "pair-not-checked"],
    "transfer-decision": [
        "head-slice-assert",
        "region-count",
        "hisparse-decode-only-spec",
        "hetero-tp-direct-to-host",
        "hetero-tp-mixed-kinds",
        "dcp-mixed-kinds",
        "dcp-topology",
        "dcp-geometry",
        "item-stride",
        "pp-layer-pairing",
        "source-mixed-kinds",
        "head-slice-overrun",
        "runtime-error",
    ],
    "connector-startup": [
        "connector-startup",
        "staging-mla",
        "staging-chunk-size",
        "nixl-ib-device",
        "decode-host-destination",
        "minimax-index-value",
        "hisparse-host-as-vram",
    ],
    "startup-log": ["decode-radix-disabled"],
    # backend hook (mooncake branch): kvcheck.checks.mooncake
    "mooncake-transfer": [
        "mooncake-silent-corruption",
        "mooncake-send-fails",
        "mooncake-worker-dies",
        "mooncake-dcp-topology",
        "mooncake-runtime-error",
        "mooncake-unchecked",
    ],
    "mooncake-startup": [
        "mooncake-ib-device",
        "mooncake-ib-device-file",
        "mooncake-efa",
        "mooncake-session-probe",
        "mooncake-thread-pool",
        "mooncake-custom-pool",
        "mooncake-tcp",
        "mooncake-protocol",
    ],
    # The pipeline's own findings (kvcheck.cluster.pipeline / decide), documented above.
    "pipeline": list(PIPELINE_DOCS),
    "agents": [
        "agent-geometry",
        "agent-no-common-backend",
        "agent-register-failed",
        "agent-alloc-failed",
        "agent-vram-untested",
        "agent-publish-failed",
    ],
    "probe": [
        "probe-unreachable",
        "probe-timeout",
        "probe-peer-lost",
        "probe-no-common-backend",
        "probe-remote-unregistered",
        "probe-remote-kind",
        "probe-data-mismatch",
        "probe-registration-failed",
        "probe-tcp-fallback",
        "probe-error",
        "probe-not-kvcheck",
        "probe-skipped",
        "probe-peer-restarted",
        "probe-unconfirmed",
        "probe-unconfirmed-region",
        "probe-ok",  # the Mooncake probe's report of a verified transfer (info)
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


def all_checks() -> list[dict]:
    """Every check kvcheck runs, in one list: pair checks (``kvcheck.checks.REGISTRY``),
    cluster checks (``kvcheck.cluster.checks.CLUSTER_CHECKS``) and the pipeline's own
    findings; each ``{id, scope, severity, title, what, why, fix, finding_ids}``."""
    from kvcheck.checks import REGISTRY
    from kvcheck.cluster.checks import CLUSTER_CHECKS

    out = [
        {
            "id": c.id,
            "scope": "pair",
            "severity": c.severity.value,
            "title": c.title,
            "what": c.what,
            "why": c.why,
            "fix": c.fix,
            "finding_ids": list(FINDING_IDS.get(c.id, [])),
        }
        for c in REGISTRY.values()
    ]
    out += [
        {
            "id": c.id,
            "scope": "cluster",
            "severity": c.severity.value,
            "title": c.title,
            "what": c.what,
            "why": c.why,
            "fix": c.fix,
            "finding_ids": [],
        }
        for c in CLUSTER_CHECKS.values()
    ]
    out += [
        {
            "id": i,
            "scope": "pipeline",
            "severity": sev,
            "title": what.split(". ")[0].rstrip("."),
            "what": what,
            "why": why,
            "fix": fix,
            "finding_ids": [],
        }
        for i, (sev, what, why, fix) in PIPELINE_DOCS.items()
    ]
    for name in ("agents", "probe"):
        if name in REGISTRY:
            continue
        out.append(
            {
                "id": name,
                "scope": "live",
                "severity": "error",
                "title": f"live NIXL {name} findings",
                "what": f"Findings of --prefill-agent/--decode-agent{' and --probe' if name == 'probe' else ''}.",
                "why": "Live agents show what NIXL registered and moved.",
                "fix": "See each finding's fix.",
                "finding_ids": list(FINDING_IDS[name]),
            }
        )
    return out


def find_check(check_id: str) -> dict | None:
    """The ``all_checks()`` entry that owns ``check_id`` (a check id or a finding id)."""
    owner = check_of(check_id)
    checks = all_checks()
    return next((c for c in checks if c["id"] == check_id), None) or next((c for c in checks if c["id"] == owner), None)


def validate_ignore(ignore: Iterable[str], extra: Iterable[str] = ()) -> None:
    """``InputError`` (exit 2) for an ``--ignore`` id that no check emits."""
    from kvcheck.checks import REGISTRY
    from kvcheck.cluster.checks import CLUSTER_CHECKS
    from kvcheck.errors import InputError

    known = set(REGISTRY) | set(all_finding_ids()) | set(CLUSTER_CHECKS) | set(extra)
    unknown = set(ignore) - known
    if unknown:
        import difflib

        hints = [
            f"{u} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(u, sorted(known), n=1)) else u
            for u in sorted(unknown)
        ]
        raise InputError(
            f"unknown check id(s) for --ignore: {', '.join(hints)}; 'kvcheck checks' lists them", field="--ignore"
        )
