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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from kvcheck.checks.base import Finding, Severity
from kvcheck.cluster.model import ClassResult, ClusterReport, DeploymentResult, InstanceResult, Located, PairResult, finding
from kvcheck.errors import ArgparseRefusal, InputError
from kvcheck.report.model import Report, verdict_of
from kvcheck.sources.deployments.instance import Deployment, Instance, Location

# Findings the pipeline itself emits (beside the pair checks and kvcheck.cluster.checks).
PIPELINE_FINDING_IDS = ("unresolved-variable", "unknown-model", "unknown-release", "unknown-gpu", "backend-not-modeled", "deployment-problem")

# Checks of the pair preflight that are about NIXL's transfer only: dropped for a pair
# where neither side uses NIXL (kvcheck does not model Mooncake's transfer).
NIXL_ONLY_CHECKS = ("transfer-decision", "transfer-backend", "nixl-backend", "nixl-backend-params", "item-length-larger", "hisparse-draft-nixl", "hetero-tp-performance")

# An image that names no SGLang release: kvcheck checks with the newest release it
# models and says so. A warning, not ``unchecked``: the published deployments kvcheck is
# measured on (Dynamo runtime images, docs blocks without an image) are expected to pass.
UNKNOWN_RELEASE_SEVERITY = Severity.WARNING

# What a reader's ``Problem`` weighs. Default: unchecked (the reader could not take part
# of the deployment as written, so some pair may be missing or wrong). A server outside
# PD and an ``envFrom`` kvcheck cannot read (usually a token Secret) leave every pair it
# found checkable: warnings.
PROBLEM_SEVERITY = {"not-disaggregated": Severity.WARNING, "env-from": Severity.WARNING, "unresolved-address": Severity.INFO}

# Typed args that never change a pair's decision: instances differing only in them share
# a class. The bootstrap port is checked per instance by the cluster checks.
NOT_IN_CLASS_KEY = {"disaggregation_bootstrap_port"}

_FLAG_RE = re.compile(r"--[a-z0-9][a-z0-9-]*")


@dataclass
class ClusterOptions:
    """What the command line adds to the deployments.

    ``model_config``: one config.json for every instance (``--model-config``);
    ``models_dir``: a Hugging Face cache folder (``--models``); ``sglang_version``: the
    release every instance runs (overrides image tags); ``gpu``/``prefill_gpu``/
    ``decode_gpu``: GPU names that override the manifests'; ``prefill_sglang_version``/
    ``decode_sglang_version``: per-role releases (override ``sglang_version``); ``kernel``/``ignore``: as for
    ``run_preflight``; ``allow_unchecked``: exit 0 instead of 4 on ``unchecked``;
    ``environ``: where ``HF_HOME``/``HF_HUB_CACHE`` are read (default ``os.environ``).
    """

    model_config: Path | None = None
    models_dir: Path | None = None
    sglang_version: str | None = None
    prefill_sglang_version: str | None = None
    decode_sglang_version: str | None = None
    gpu: str | None = None
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    kernel: str = "builtin"
    ignore: tuple[str, ...] = ()
    allow_unchecked: bool = False
    environ: Mapping[str, str] | None = None


@dataclass
class _Caches:
    argv: dict[tuple, Any] = field(default_factory=dict)
    parsed: dict[tuple, Any] = field(default_factory=dict)
    models: dict[tuple, Any] = field(default_factory=dict)
    parsed_models: dict[Any, Any] = field(default_factory=dict)


def check_deployments(deployments: Iterable[Deployment], options: ClusterOptions | None = None, **kwargs: Any) -> ClusterReport:
    """Check every deployment; see the module docstring.

    ``options`` (or its fields as keyword arguments). Returns a ``ClusterReport``.
    Raises ``InputError`` (exit 2) when nothing can be checked: no deployment, a
    deployment without any SGLang server, an instance whose args SGLang would refuse
    to parse, a model config that is not valid JSON.
    """
    opts = options or ClusterOptions(**kwargs)
    deployments = combine_partial(list(deployments))
    if not deployments:
        raise InputError("no deployment was read from the -f files")
    from kvcheck.cluster.checks import ALL_FINDING_IDS

    own = set(ALL_FINDING_IDS) | set(PIPELINE_FINDING_IDS) | {p.id for d in deployments for p in d.problems}
    pair_ignore = tuple(i for i in opts.ignore if i not in own)
    caches = _Caches()
    results = [_check_one(d, opts, caches, pair_ignore, own) for d in deployments]
    kernel = next((p.report.kernel for r in results for p in r.pairs if p.report is not None), "builtin")
    releases = sorted({ir.release or "unknown" for r in results for ir in r.instances})
    runtime = "sglang " + (", ".join(releases) if releases else "0.5.23")
    return ClusterReport(results, kernel=kernel, runtime=runtime, allow_unchecked=opts.allow_unchecked)


def combine_partial(deployments: list[Deployment]) -> list[Deployment]:
    """Deployments read from separate files that each hold one role only (``-f
    prefill.yaml -f decode.yaml``) are one deployment: merge them, in order, into one.
    Deployments with both roles, sweep variants and deployments without instances stay
    as they are (two complete deployments given together are never cross-paired)."""
    partial = [d for d in deployments if d.variant is None and d.instances and len({i.role for i in d.instances}) == 1]
    if len(partial) < 2 or len({i.role for d in partial for i in d.instances}) < 2:
        return deployments
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
    return out


def _check_one(dep: Deployment, opts: ClusterOptions, caches: _Caches, pair_ignore: tuple[str, ...], own: set[str]) -> DeploymentResult:
    from kvcheck.cluster.checks import run_cluster_checks

    if not dep.instances and any(p.id in ("config-not-read", "unresolved-variable") for p in dep.problems):
        # every server's role is hidden (a --config file inside the image, an unset
        # variable): unchecked with the reason named, not bad input (readers, issue 16)
        hidden = [finding(p.id, PROBLEM_SEVERITY.get(p.id, Severity.UNCHECKED), p.message, p.fix or "Check this part by hand.", p.location) for p in dep.problems]
        return DeploymentResult(dep, [], [], [], hidden)
    if not dep.instances:
        if dep.problems:
            p = dep.problems[0]
            raise InputError(f"no SGLang prefill or decode server found: {p.message}", source=str(p.location))
        raise InputError("no SGLang prefill or decode server found (no launch line with --disaggregation-mode prefill|decode)", source=str(dep.source))
    from kvcheck.sources.limits import check_cap

    check_cap("instances", len(dep.instances), field="instances", source=str(dep.source))
    instances = [_read_instance(inst, opts, caches) for inst in dep.instances]
    classes = _group(instances, opts)
    check_cap("classes", len(classes), field="classes (instances whose KV-relevant args differ)", source=str(dep.source))
    pairs = [_decide(p, d, opts, pair_ignore) for p in classes if p.role == "prefill" for d in classes if d.role == "decode"]
    findings = [finding(p.id or "deployment-problem", PROBLEM_SEVERITY.get(p.id, Severity.UNCHECKED), p.message, p.fix or "Fix the manifest line named, or check this part by hand.", p.location) for p in dep.problems]
    findings += run_cluster_checks(dep, instances)
    for x in findings + [y for c in classes for y in c.findings]:
        if x.finding.id in opts.ignore:  # reader problems are ignorable by their own id too
            x.finding.ignored = True
    for pr in pairs:
        for x in pr.findings:
            if x.finding.id in own and x.finding.id in opts.ignore:
                x.finding.ignored = True
        pr.verdict = verdict_of([x.finding for x in pr.findings])
    return DeploymentResult(dep, instances, classes, pairs, findings)


# -- instances -----------------------------------------------------------------------


def _unresolved_findings(inst: Instance) -> list[Located]:
    out = []
    for u in inst.unresolved:
        where = f"`{u.flag} ${{{u.variable}}}`: " if u.flag else f"`${{{u.variable}}}` in {inst.name}: "
        out.append(finding(
            "unresolved-variable", Severity.UNCHECKED,
            f"{where}{u.variable} is not set; pass --env FILE or set it",
            f"Give {u.variable} a value: in the manifest, with --env FILE (VAR=value lines), or in kvcheck's environment.",
            u.location,
        ))
    return out


def _parse(inst: Instance, caches: _Caches, table: str | None = None) -> tuple[dict[str, Any], Any]:
    """(args dest -> value, typed ServerArgs) of ``inst.argv`` read with release
    ``table``'s flags (default: the newest modeled), cached per argv and release."""
    key = (tuple(inst.argv), table)
    hit = caches.parsed.get(key)
    if hit is None:
        from kvcheck.sglang.args import build_server_args
        from kvcheck.sglang.flags import FlagTable

        from kvcheck.sources.redact import collect_secrets, register_secrets, secrets_from_argv

        # Before anything can echo a token (an error line quoting a bad value): every
        # secret the launch line or its environment holds is scrubbed from all output.
        register_secrets(secrets_from_argv(inst.argv) | collect_secrets(dict(inst.env)))
        source = f"{inst.location} ({inst.name})"
        try:
            args = (FlagTable.load(table) if table else FlagTable.load()).parse_argv(list(inst.argv), source)
            args.pop("config", None)
            typed = build_server_args(args, source)
            hit = (args, typed, repr(sorted(typed.model_dump(exclude=NOT_IN_CLASS_KEY).items())))
        except InputError as exc:
            hit = exc
        caches.parsed[key] = hit
    if isinstance(hit, InputError):
        raise hit
    return hit


def _resolve_model(name: str | None, inst: Instance, opts: ClusterOptions, caches: _Caches, *, draft: bool = False, overrides: Any = None):
    """(ModelConfig or None, source text, id) for ``name``, cached; ``overrides`` is the
    instance's ``--json-model-override-args`` (applied before parsing, as SGLang does)."""
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sources.models import resolve_model_config

    base = Path(inst.location.file).parent
    override = None if draft else opts.model_config
    overrides = overrides if overrides not in (None, "", "{}", {}) else None
    okey = overrides if isinstance(overrides, str) or overrides is None else repr(overrides)
    key = (name, str(base), override, draft, okey)
    if key not in caches.models:
        ms = resolve_model_config(name, override=override, models_dir=opts.models_dir, base=base, environ=opts.environ)
        if ms is None:
            caches.models[key] = (None, "", None)
        else:
            cfg = caches.parsed_models.get((ms.source, okey))
            if cfg is None:
                try:
                    cfg = caches.parsed_models[(ms.source, okey)] = parse_model_config(
                        ms.raw, source=str(ms.path) if ms.path else ms.source, override_args=overrides
                    )
                except InputError as exc:
                    if ms.kind != "catalog":
                        raise  # the user's own file: bad input (exit 2)
                    caches.models[key] = (None, f"{ms.source}: not usable ({exc})", None)
                    return caches.models[key]
            caches.models[key] = (cfg, ms.source, ms.source)
    return caches.models[key]


@dataclass
class _Derived:
    """What an instance's inputs give, shared by every instance with the same inputs:
    args, release, model/draft configs, GPU, class key, and the findings to write
    (as ``(id, severity, message-suffix, fix, flag)``; the instance name is prefixed)."""

    args: dict[str, Any]
    release: str | None
    release_source: str
    model: str | None
    model_source: str
    build: tuple
    key: tuple
    notes: list[tuple] = field(default_factory=list)


def _read_instance(inst: Instance, opts: ClusterOptions, caches: _Caches) -> InstanceResult:
    ir = InstanceResult(inst)
    if inst.unresolved:
        ir.findings += _unresolved_findings(inst)
        if any(u.flag for u in inst.unresolved):
            try:
                _parse(inst, caches)
            except InputError:  # the unresolved value is what does not parse: unchecked, not bad input
                ir._key = ("blocked", inst.role, id(inst))  # type: ignore[attr-defined]
                return ir
    sig = (inst.role, tuple(inst.argv), inst.image, inst.gpu_type, tuple(sorted(inst.env.items())), inst.location.file, getattr(inst, "model", None), bool(inst.unresolved))
    derived = caches.argv.get(sig)
    if derived is None:
        try:
            derived = caches.argv[sig] = _derive(inst, opts, caches)
        except ArgparseRefusal as exc:
            return _argparse_refused(ir, exc, opts)
    ir.args, ir.release, ir.release_source = derived.args, derived.release, derived.release_source
    ir.model, ir.model_source = derived.model, derived.model_source
    for fid, sev, msg, fix, flag in derived.notes:
        ir.findings.append(finding(fid, sev, f"{inst.name}: {msg}", fix, (inst.arg_locations.get(flag) if flag else None) or inst.location))
    ir._key, ir._build = derived.key, derived.build  # type: ignore[attr-defined]
    if inst.unresolved:  # its own class: the finding names this instance's variable
        ir._key = derived.key + (("unresolved", id(inst)),)  # type: ignore[attr-defined]
    return ir


def _argparse_refused(ir: InstanceResult, exc: ArgparseRefusal, opts: ClusterOptions) -> InstanceResult:
    """An instance whose launch line its release's own argument parser refuses (an ambiguous
    abbreviation, ``kvcheck.errors.ArgparseRefusal``): the server exits at start-up, so the
    instance gets the ``startup-argparse`` error and its own class with no side (its pairs
    fail on it; nothing else about them is judged). On a release kvcheck does not model the
    refusal is not that release's: bad input, as before."""
    from kvcheck.checks.startup import argparse_finding

    inst = ir.instance
    choice = _choose_release(inst, opts)
    if choice is not None and not choice.modeled:
        raise exc
    if choice is not None:
        exc.release, exc.version_source = choice.release, choice.source
    f = argparse_finding(inst.role, exc)
    f.message = f"{inst.name}: {f.message}"
    ir.findings.append(Located(f, inst.arg_locations.get(exc.option) or inst.location))
    ir._key = ("argparse-refused", inst.role, tuple(inst.argv), exc.release)  # type: ignore[attr-defined]
    return ir


def _derive(inst: Instance, opts: ClusterOptions, caches: _Caches) -> _Derived:
    from kvcheck.sglang.releases import NEWEST_MODELED, release_from_image
    from kvcheck.sides import RELEVANT_ENV

    notes: list[tuple] = []
    choice = _choose_release(inst, opts)
    args, typed, dump = _parse(inst, caches, choice.table if choice is not None else None)
    # Release: with the per-release model (kvcheck.sglang.releases.choose_release) its
    # choice, judged per pair by the unknown-release check; without it: --sglang-version,
    # else the image tag, else the newest modeled release, said here.
    if choice is not None:
        release, release_source = choice.release, choice.source
    elif opts.sglang_version:
        release, release_source = opts.sglang_version, "--sglang-version"
    else:
        rel, reason = release_from_image(inst.image)
        if rel is not None:
            release, release_source = rel, reason
        else:
            release, release_source = NEWEST_MODELED, f"assumed (newest modeled): {reason}"
            notes.append(("unknown-release", UNKNOWN_RELEASE_SEVERITY, f"{reason}; checked as SGLang {NEWEST_MODELED}",
                          "Pass --sglang-version X.Y.Z with the release the image runs, or use an lmsysorg/sglang:vX.Y.Z image tag.", None))
    model_path = typed.model_path or getattr(inst, "model", None)  # srt-slurm's model.path alias
    if typed.model_path is None and model_path:
        args = {**args, "model_path": model_path}
    overrides = args.get("json_model_override_args")
    cfg, src, mid = _resolve_model(model_path, inst, opts, caches, overrides=overrides)
    clue = getattr(inst, "model", None)
    if cfg is None and clue and clue != model_path:
        # --model-path is a path inside the image: the model the file names elsewhere
        # (--served-model-name, a recipe's identity, an env default; readers, issue 16)
        ccfg, csrc, cmid = _resolve_model(clue, inst, opts, caches, overrides=overrides)
        if ccfg is not None:
            cfg, mid, model_path = ccfg, cmid, clue
            args = {**args, "model_path": clue}  # the model both sides are compared by
            src = f"{csrc}; named by {getattr(inst, 'model_clue', '') or 'the deployment file'}"
    if cfg is None:
        notes.append(_unknown_model(model_path, "--model-path", src))
    draft_cfg, draft_id, draft_missing = None, None, False
    if typed.has_draft_worker and typed.speculative_draft_model_path and typed.speculative_draft_model_path != model_path:
        draft_cfg, dsrc, draft_id = _resolve_model(typed.speculative_draft_model_path, inst, opts, caches, draft=True, overrides=overrides)
        if draft_cfg is None:
            draft_missing = True
            notes.append(_unknown_model(typed.speculative_draft_model_path, "--speculative-draft-model-path", dsrc))
    cli_gpu = (opts.prefill_gpu if inst.role == "prefill" else opts.decode_gpu) or opts.gpu
    gpu = cli_gpu or inst.gpu_type
    if gpu is not None and cli_gpu is None:
        from kvcheck.sglang.gpu import resolve_gpu

        try:
            resolve_gpu(gpu, source=str(inst.location), field="gpu")
        except InputError:
            notes.append(("unknown-gpu", Severity.UNCHECKED,
                          f"GPU {gpu!r} ({inst.gpu_source or 'manifest'}) is not one kvcheck knows; page sizes and attention backends depend on it",
                          "Pass --gpu NAME (h100, h200, b200, gb200, ... or smXX).", None))
            gpu = None
    env = tuple(sorted((k, v) for k, v in inst.env.items() if k in RELEVANT_ENV or k.startswith(("SGLANG_", "UCX_", "NIXL_"))))
    unchecked = cfg is None or draft_missing
    key = (inst.role, mid, draft_id, dump, env, gpu, release, str(args.get("load_balance_method")), "unchecked" if unchecked else "")
    return _Derived(args, release, release_source, model_path, src or "not found", (cfg, draft_cfg, gpu, dict(inst.env), unchecked, choice), key, notes)


def _choose_release(inst: Instance, opts: ClusterOptions):
    """The per-release model's ``ReleaseChoice`` for ``inst`` (image tag, else
    ``--sglang-version``, else installed/newest), or None when this build has no
    ``choose_release`` (then the pipeline's own rule applies)."""
    try:
        from kvcheck.sglang.releases import choose_release, release_from_image
    except ImportError:
        return None
    rel, reason = release_from_image(inst.image)
    per_side = opts.prefill_sglang_version if inst.role == "prefill" else opts.decode_sglang_version
    cli, cli_source = (per_side, f"--{inst.role}-sglang-version") if per_side else (opts.sglang_version, "--sglang-version")
    return choose_release(rel, reason, cli, cli_source, input_unknown=None if rel or not inst.image else reason)


def _unknown_model(name: str | None, flag: str, why: str = "") -> tuple:
    """An ``unknown-model`` note (see ``_Derived.notes``)."""
    if why:
        return ("unknown-model", Severity.UNCHECKED, f"model {name!r} ({flag}): {why}", "Pass --model-config FILE with the model's config.json.", flag)
    if not name:
        return ("unknown-model", Severity.UNCHECKED, f"no {flag} given, so there is no model config to read", f"Add {flag}, or pass --model-config FILE.", flag)
    return (
        "unknown-model", Severity.UNCHECKED,
        f"model {name!r} ({flag}) has no config.json kvcheck can read: not a local directory, not in a Hugging Face cache, not in kvcheck's catalog",
        "Pass --model-config FILE with the model's config.json, or --models DIR holding a Hugging Face cache (models--ORG--NAME/snapshots/REV/config.json).",
        flag,
    )


# -- classes -------------------------------------------------------------------------


def _group(instances: list[InstanceResult], opts: ClusterOptions) -> list[ClassResult]:
    from kvcheck.sources import build_side

    by_key: dict[Any, ClassResult] = {}
    counts = {"prefill": 0, "decode": 0}
    for ir in instances:
        key = ir._key  # type: ignore[attr-defined]
        cls = by_key.get(key)
        if cls is None:
            role = ir.instance.role
            counts[role] += 1
            cls = by_key[key] = ClassResult(id=f"{role}-{counts[role]}", role=role, key=key)
            seen = set()
            for x in ir.findings:
                sig = (x.finding.id, x.finding.message)
                if sig not in seen:
                    seen.add(sig)
                    cls.findings.append(x)
            build = getattr(ir, "_build", None)
            if build is not None and not build[4]:
                cfg, draft_cfg, gpu, env, _, choice = build
                inst = ir.instance
                extra = {"release": choice} if choice is not None and "release" in _build_side_params() else {}
                side = build_side(inst.role, dict(ir.args or {}), env, f"{inst.name} ({inst.location})", model=cfg, draft_model=draft_cfg, gpu=gpu, base=Path(inst.location.file).parent, image=inst.image, **extra)
                side.sglang_version, side.version_source = ir.release, ir.release_source
                cls.side = side
        ir.class_id = cls.id
        cls.members.append(ir)
    return list(by_key.values())


def _build_side_params() -> frozenset[str]:
    import inspect

    from kvcheck.sources import build_side

    return frozenset(inspect.signature(build_side).parameters)


# -- pairs ---------------------------------------------------------------------------


def _decide(p: ClassResult, d: ClassResult, opts: ClusterOptions, ignore: tuple[str, ...]) -> PairResult:
    from kvcheck.preflight import _check_of, run_preflight

    class_findings = p.findings + d.findings
    if p.side is None or d.side is None:
        # The pair is unchecked, but what does not depend on the model still fails it:
        # --allow-unchecked must never let a certain failure through.
        certain = _model_independent_failures(p, d)
        findings = certain + list(class_findings)
        return PairResult(p, d, verdict_of([x.finding for x in findings]), None, findings)
    report = run_preflight(p.side, d.side, kernel=opts.kernel, ignore=ignore)
    # backend hook (mooncake branch, issue 18): run_preflight decides every backend itself
    # (Mooncake's own transfer decision; MORI/Ascend/fake: backend-unchecked), the same on
    # every input path, so nothing is dropped or added here.
    extra: list[Located] = []
    located = []
    for f in report.findings:
        locs = _locate(f, p, d)
        located.append(Located(f, locs[0], locs[1:]))
    findings = located + extra + list(class_findings)
    return PairResult(p, d, verdict_of([x.finding for x in findings]), report, findings)


def _model_independent_failures(p: ClassResult, d: ClassResult) -> list[Located]:
    """Failures of a pair that hold whatever the model is, for a class kvcheck cannot
    build a side for (unknown model, unresolved variable in another flag): transfer
    backends that differ with NIXL on the prefill (the decode's first ZMQ message kills
    the prefill's NIXL bootstrap thread: ``transfer-backend``), and a decode PP size that
    is neither the prefill's nor 1 (``_resolve_rank_mapping``'s assert, 0.5.23)."""
    from kvcheck.checks.transfer import _BOOTSTRAP_FIX, backend_mismatch_error, backend_mismatch_message
    from kvcheck.preflight import hang_text
    from kvcheck.sglang.pd_release import behaviour
    from kvcheck.sglang.plan import PairInfo, bootstrap_checks

    pa, da = p.first.args, d.first.args
    if pa is None or da is None:
        return []
    out: list[Located] = []
    pb = pa.get("disaggregation_transfer_backend", "mooncake")
    db = da.get("disaggregation_transfer_backend", "mooncake")
    if pb != db and pb == "nixl":
        rt = backend_mismatch_error(pb, db, hang_text({"bootstrap_timeout_s": 300, "waiting_timeout_s": 300}))
        f = Finding(id="transfer-backend", severity=Severity.ERROR, runtime_error=rt,
                    message=backend_mismatch_message(pb, db) + " (whatever the model)",
                    fix="Set --disaggregation-transfer-backend nixl on both servers.")
        out.append(Located(f, _flag_location("--disaggregation-transfer-backend", d) or d.first.instance.location, []))
    pp, dp = int(pa.get("pp_size") or 1), int(da.get("pp_size") or 1)
    if dp not in (pp, 1):
        # The decode's own PP check (plan.bootstrap_checks), on sides that agree in
        # everything else it compares, so that only the PP assert can fire.
        same = dict(page_size=1, kv_cache_dtype_str="auto", attn_tp_size=1, attn_cp_size=1)
        try:
            failures = bootstrap_checks(PairInfo(**same, pp_size=pp), PairInfo(**same, pp_size=dp), behaviour(d.first.release))
        except ValueError:  # the decode's release: bootstrap checks not modeled (the pair is unchecked)
            failures = []
        for fid, rt in failures:
            if fid == "pp-size-mismatch":
                f = Finding(id=fid, severity=Severity.ERROR, runtime_error=rt,
                            message=f"pipeline parallel sizes: prefill --pp-size={pp}, decode --pp-size={dp} (decode must equal the prefill's or be 1, whatever the model)",
                            fix=_BOOTSTRAP_FIX[fid])
                out.append(Located(f, _flag_location("--pp-size", d) or d.first.instance.location, []))
    return out


def _dest_locations(inst: Instance) -> dict[str, Location]:
    cached = getattr(inst, "_dest_locs", None)
    if cached is not None:
        return cached
    from kvcheck.sglang.flags import FlagTable

    table = FlagTable.load()
    out: dict[str, Location] = {}
    for opt, loc in inst.arg_locations.items():
        try:
            out.setdefault(table.resolve(opt).dest, loc)
        except InputError:
            continue
    try:
        inst._dest_locs = out  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return out


def _flag_location(flag: str, cls: ClassResult) -> Location | None:
    from kvcheck.sglang.flags import FlagTable

    f = FlagTable.load().get(flag)
    if f is None:
        return None
    return _dest_locations(cls.first.instance).get(f.dest)


def _locate(f: Finding, p: ClassResult, d: ClassResult) -> list[Location]:
    """The manifest lines a pair finding is about, primary first: every ``--flag`` named
    in its message that a side's manifest sets (the side whose role is named just before
    the flag, else the decode then the prefill). When both sides are named (a mismatch),
    the decode's line comes first: the decode is the side that raises the bootstrap
    checks; a message about one side (``prefill: ...``, ``the prefill server ...``) points at that side's lines first.
    Else the decode's (or, for a prefill-only message, the prefill's) instance line."""
    found: list[tuple[str, Location]] = []
    text = f.message
    # A finding about one side ("prefill: ...", "decode: ...") points at that side's lines.
    side = re.match(r"(?:the )?(prefill|decode)(?![-\w])", text)  # "prefill: ...", "the prefill runs ..."
    owner = (p if side.group(1) == "prefill" else d) if side else None
    default = (owner, d if owner is p else p) if owner is not None else (d, p)
    for m in _FLAG_RE.finditer(text):
        before = text[max(0, m.start() - 12):m.start()]
        order = (p,) if "prefill" in before else (d,) if "decode" in before else default
        for cls in order:
            loc = _flag_location(m.group(0), cls)
            if loc is not None and loc not in [x for _, x in found]:
                found.append((cls.role, loc))
                break
    if not found:
        # a flag named only in the fix: the side the finding is about, never the other
        # side's line (a prefill without --page-size is not at the decode's --page-size)
        for m in _FLAG_RE.finditer(f.fix):
            for cls in ((owner,) if owner is not None else default):
                loc = _flag_location(m.group(0), cls)
                if loc is not None:
                    return [loc]
    if found:
        first = owner.role if owner is not None else "decode"
        found.sort(key=lambda rl: rl[0] != first)
        return [loc for _, loc in found]
    if owner is not None:
        return [owner.first.instance.location]
    if f.message.startswith("prefill") or " the prefill " in f.message[:60]:
        return [p.first.instance.location]
    return [d.first.instance.location]
