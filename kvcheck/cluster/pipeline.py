"""Deployments -> instances -> classes -> pairs decided once -> a ``ClusterReport``.

For each ``Deployment`` (``kvcheck.sources.deployments``):

1. every ``Instance`` becomes an ``InstanceResult``: its ``argv`` parsed with SGLang
   0.5.23's flag table (``kvcheck.sglang.flags``), its release (``--sglang-version``, else
   the image tag through ``kvcheck.sglang.releases.release_from_image``), its GPU (the
   ``--gpu`` options, else the manifest's ``gpu_type``), its model config
   (``kvcheck.sources.models.resolve_model_config``: ``--model-config``, local directory,
   Hugging Face cache, the shipped catalog) and its findings (``unresolved-variable``,
   ``unknown-model``, ``unknown-release``, ``unknown-gpu``);
2. instances whose KV-relevant inputs agree form one class (key: role, model and draft
   model source, every typed ``ServerArgs`` field, the environment ``build_side`` keeps,
   GPU, release, ``--load-balance-method``); one ``Side`` is built per class;
3. every prefill class x decode class pair is decided once with
   ``kvcheck.preflight.run_preflight`` (so N x M instances cost classes, not instances);
   every backend is decided there (NIXL's and Mooncake's transfer decisions; MORI, Ascend
   and fake pairs are ``backend-unchecked``), the same as on the pair path;
4. the cluster-wide checks (``kvcheck.cluster.checks``) run over all instances.

Parsing, model lookup and typing are cached per distinct argv / model name, so a
deployment of thousands of identical instances costs about as much as its classes.

Stages by module: instances ``kvcheck.cluster.instances``, classes
``kvcheck.cluster.classes``, pair decisions ``kvcheck.cluster.decide``, cluster checks
``kvcheck.cluster.checks``; options and per-run caches ``kvcheck.cluster.options``. This
module runs them in order and merges partial deployments read from several files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvcheck.checks.base import Severity
from kvcheck.cluster.classes import group_classes
from kvcheck.cluster.instances import read_instance
from kvcheck.cluster.model import ClusterReport, DeploymentResult, finding
from kvcheck.cluster.options import Caches, ClusterOptions
from kvcheck.cluster.refusals import refusal_finding
from kvcheck.errors import InputError
from kvcheck.report.model import verdict_of
from kvcheck.sources.deployments.instance import Deployment

__all__ = ["ClusterOptions", "check_deployments", "combine_partial", "refusal_finding"]

# Findings the pipeline itself emits (beside the pair checks and kvcheck.cluster.checks).
PIPELINE_FINDING_IDS = (
    "unresolved-variable",
    "unknown-model",
    "unknown-gpu",
    "deployment-problem",
    "release-window",
    "release-clues-disagree",
    "gpu-clues-disagree",
)

# What a reader's ``Problem`` weighs. Default: unchecked (the reader could not take part
# of the deployment as written, so some pair may be missing or wrong). A server outside
# PD and an ``envFrom`` kvcheck cannot read (usually a token Secret) leave every pair it
# found checkable: warnings.
PROBLEM_SEVERITY = {
    "not-disaggregated": Severity.WARNING,
    "env-from": Severity.WARNING,
    "duplicate-key": Severity.WARNING,
    "unresolved-address": Severity.INFO,
    "source-not-read": Severity.INFO,
    "startup-argparse": Severity.ERROR,
}


def check_deployments(
    deployments: Iterable[Deployment], options: ClusterOptions | None = None, **kwargs: Any
) -> ClusterReport:
    """Check every deployment; see the module docstring.

    ``options`` (or its fields as keyword arguments). Returns a ``ClusterReport``.
    Raises ``InputError`` (exit 2) when nothing can be checked: no deployment, a
    deployment without any SGLang server, an instance whose args SGLang would refuse
    to parse, a model config that is not valid JSON.
    """
    opts = options or ClusterOptions(**kwargs)
    for option, path in (
        ("--model-config", opts.model_config),
        ("--prefill-model-config", opts.prefill_model_config),
        ("--decode-model-config", opts.decode_model_config),
        ("--draft-model-config", opts.draft_model_config),
    ):
        if path is not None and Path(path).is_dir() and not (Path(path) / "config.json").is_file():
            raise InputError(
                f"the directory {path} holds no config.json (give the model's directory or its config.json)",
                source=str(path),
                field=option,
            )
    deployments = combine_partial(list(deployments))
    if not deployments:
        raise InputError("no deployment was read from the -f files")
    from kvcheck.cluster.checks import ALL_FINDING_IDS

    own = set(ALL_FINDING_IDS) | set(PIPELINE_FINDING_IDS) | {p.id for d in deployments for p in d.problems}
    from kvcheck.checks.ids import validate_ignore

    validate_ignore(opts.ignore, own)
    pair_ignore = tuple(i for i in opts.ignore if i not in own)
    caches = Caches()
    from kvcheck.memo import side_memo

    with side_memo():  # each side's start-up outcome and known-issue matches, once per run
        results = [_check_one(d, opts, caches, pair_ignore, own) for d in deployments]
    kernel = next((p.report.kernel for r in results for p in r.pairs if p.report is not None), "builtin")
    from kvcheck.release.version import version_key

    labels = {pr.report.runtime.removeprefix("sglang ") for r in results for pr in r.pairs if pr.report is not None}
    labels |= {ir.release for r in results for ir in r.instances if ir.release and not any(pr.report for pr in r.pairs)}
    runtime = "sglang " + (", ".join(sorted(labels, key=version_key)) if labels else "unknown")
    return ClusterReport(results, kernel=kernel, runtime=runtime, allow_unchecked=opts.allow_unchecked)


def combine_partial(deployments: list[Deployment]) -> list[Deployment]:
    """Deployments read from separate files that each hold one role only (``-f
    prefill.yaml -f decode.yaml``), or none (a router-only script, a file of variables, a
    server whose role is unreadable) are one deployment: merge them, in order, into one.
    Deployments with both roles and sweep variants stay as they are (two complete
    deployments given together are never cross-paired); helpers given with them join
    them (``_attach_helpers``). Files of one role beside exactly one complete deployment
    (and no recipe variants) are part of it: ``-f launch.sh -f extra-decode.yaml``."""
    # files that are each part of a deployment: one role, or none readable (a server that
    # refuses its --disaggregation-mode, a role behind an unset variable), a router, variables
    partial = [d for d in deployments if d.variant is None and len({i.role for i in d.instances}) < 2]
    complete = [d for d in deployments if not any(d is p for p in partial)]
    if len(complete) == 1 and complete[0].variant is None and any(d.instances for d in partial):
        # one whole deployment and files of one role beside it (-f launch.sh -f
        # extra-decode.yaml): the extra servers are part of it, paired with its servers
        host = complete[0]
        for d in partial:
            host.instances.extend(d.instances)
            host.routers.extend(d.routers)
            host.problems.extend(d.problems)
            host.name = f"{host.name} + {d.name}"
        return [host]
    if len(partial) < 2 or not any(d.instances or d.problems for d in partial):
        return _attach_helpers(deployments)
    merged = Deployment(
        name=" + ".join(d.name for d in partial),
        source=partial[0].source,
        instances=[i for d in partial for i in d.instances],
        routers=[r for d in partial for r in d.routers],
        problems=[p for d in partial for p in d.problems],
    )
    out, placed = [], False
    for d in deployments:
        if any(d is p for p in partial):
            if not placed:
                out.append(merged)
                placed = True
        else:
            out.append(d)
    return _attach_helpers(out)


def _attach_helpers(deployments: list[Deployment]) -> list[Deployment]:
    """Files read together that launch no prefill/decode server themselves (a router-only
    script, a file of variables, a server outside PD) are part of the deployment the
    other files make: each joins the one deployment that has servers, or, among several,
    the one whose servers its router names. A helper that can be placed nowhere stays as
    it is."""
    plain = [d for d in deployments if d.variant is None]
    hidden = ("config-not-read", "unresolved-variable", "startup-argparse", "servers-not-read")
    helpers = [d for d in plain if not d.instances and not any(p.id in hidden for p in d.problems)]
    hosts = [d for d in deployments if d.instances or any(p.id in hidden for p in d.problems)]
    if not helpers or not hosts:
        return deployments
    placed: set[int] = set()
    for h in helpers:
        target = hosts[0] if len(hosts) == 1 else None
        if target is None and h.routers:
            named = {p.instance for r in h.routers for p in r.prefills} | {
                n for r in h.routers for n in r.decode_instances
            }
            hit = [d for d in hosts if named & {i.name for i in d.instances}]
            target = hit[0] if len(hit) == 1 else None
        if target is None and not h.routers:
            target = hosts[0]  # variables or non-PD servers only: shared by every deployment read
        if target is None:
            continue
        target.routers.extend(h.routers)
        target.problems.extend(h.problems)
        target.name = f"{target.name} + {h.name}"
        placed.add(id(h))
    return [d for d in deployments if id(d) not in placed]


def _check_one(
    dep: Deployment, opts: ClusterOptions, caches: Caches, pair_ignore: tuple[str, ...], own: set[str]
) -> DeploymentResult:
    from kvcheck.cluster.checks import run_cluster_checks

    if not dep.instances and any(
        p.id in ("config-not-read", "unresolved-variable", "startup-argparse", "servers-not-read") for p in dep.problems
    ):
        # every server's role is hidden (a --config file inside the image, an unset
        # variable): unchecked with the reason named, not bad input (readers, issue 16);
        # a server that refuses its --disaggregation-mode value: a failed deployment
        hidden = [
            finding(
                p.id,
                PROBLEM_SEVERITY.get(p.id, Severity.UNCHECKED),
                p.message,
                p.fix or "Check this part by hand.",
                p.location,
            )
            for p in dep.problems
        ]
        return DeploymentResult(dep, [], [], [], hidden)
    if not dep.instances:
        if dep.problems:
            p = dep.problems[0]
            raise InputError(f"no SGLang prefill or decode server found: {p.message}", source=str(p.location))
        raise InputError(
            "no SGLang prefill or decode server found (no launch line with --disaggregation-mode prefill|decode)",
            source=str(dep.source),
        )
    from kvcheck.cluster.decide import decide
    from kvcheck.sources.limits import check_cap

    check_cap("instances", len(dep.instances), field="instances", source=str(dep.source))
    for inst in dep.instances:
        extra_env = opts.prefill_env if inst.role == "prefill" else opts.decode_env
        if extra_env:
            inst.env = {**inst.env, **extra_env}
            # a variable whose value the file leaves unknown, given here: known now
            inst.unresolved = [u for u in inst.unresolved if u.env_var is None or u.env_var not in extra_env]
    instances = [read_instance(inst, opts, caches) for inst in dep.instances]
    classes = group_classes(instances, opts, caches)
    check_cap(
        "classes", len(classes), field="classes (instances whose KV-relevant args differ)", source=str(dep.source)
    )
    pairs = [
        decide(p, d, opts, pair_ignore) for p in classes if p.role == "prefill" for d in classes if d.role == "decode"
    ]
    findings = [
        finding(
            p.id or "deployment-problem",
            PROBLEM_SEVERITY.get(p.id, Severity.UNCHECKED),
            p.message,
            p.fix or "Fix the manifest line named, or check this part by hand.",
            p.location,
        )
        for p in dep.problems
    ]
    findings += run_cluster_checks(dep, instances)
    from kvcheck.checks.ids import apply_ignore

    # --ignore, once over every finding (reader problems by their own id too).
    apply_ignore(
        [
            x.finding
            for x in findings + [y for c in classes for y in c.findings] + [y for pr in pairs for y in pr.findings]
        ],
        opts.ignore,
    )
    for pr in pairs:
        pr.verdict = verdict_of([x.finding for x in pr.findings])
    return DeploymentResult(dep, instances, classes, pairs, findings)
