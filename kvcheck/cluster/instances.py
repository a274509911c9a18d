"""The instances stage of ``kvcheck.cluster.pipeline``: every ``Instance`` becomes an
``InstanceResult``: its flags parsed by each release's own parser (cached per argv and
release), its release window (``kvcheck.release.window``), its GPU, its model config
(``kvcheck.sources.models``) and its findings (``unresolved-variable``, ``unknown-model``,
``unknown-gpu``; a start-up refusal while parsing and a release kvcheck does not model are
``kvcheck.cluster.refusals``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kvcheck.checks.base import Severity
from kvcheck.cluster.model import InstanceResult, Located, finding
from kvcheck.cluster.options import Caches, ClusterOptions
from kvcheck.cluster.refusals import (
    Refused,
    Unmodeled,
    option_words,
    refused,
    unmodeled,
    unmodeled_reading,
)
from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Instance

# Typed args that never change a pair's decision: instances differing only in them share
# a class. The bootstrap port is checked per instance by the cluster checks.
NOT_IN_CLASS_KEY = {"disaggregation_bootstrap_port"}
_T = TypeVar("_T")


def _unresolved_findings(inst: Instance) -> list[Located]:
    """An ``unresolved-variable`` per value the file leaves to run time. The reference is
    quoted only under ``kvcheck.sources.quoting.reference_shown``'s rule: a command
    substitution (``$(cat FILE)``, backticks) is named as one, never quoted."""
    from kvcheck.sources.quoting import COMMAND_SUBSTITUTION, is_command_substitution, reference_shown, shown

    out = []
    for u in inst.unresolved:
        ref = reference_shown(getattr(u, "shown", None) or f"${{{u.variable}}}")
        where = f"`{u.flag} {ref}`: " if u.flag else f"`{ref}` in {inst.name}: "
        if is_command_substitution(u.variable):
            what = (
                f"a command substitution ({COMMAND_SUBSTITUTION}): kvcheck never runs commands, so its output is "
                "not known"
            )
            fix = (
                "Write the value itself in the file, or a variable kvcheck can read (in the file, --env FILE, or "
                "kvcheck's environment with --inherit-env): kvcheck never runs commands."
            )
        else:
            name = reference_shown(u.variable)
            what = f"{name} is not set; pass --env FILE or set it"
            if getattr(u, "origin", ""):
                # set from a source the input does not carry (a Kubernetes valueFrom)
                what = f"{name} takes its value from {u.origin}; pin it with --env FILE"
            elif u.variable.startswith(("SLURM_", "SLURMD_")):
                # kvcheck.sources.deployments.scripts._slurm_layer: known when each task starts
                what = f"{name} is set by Slurm when each task starts; pin it with --env FILE"
            fix = (
                f"Give {name} a value: in the manifest, with --env FILE (VAR=value lines), or export it and "
                "pass --inherit-env (kvcheck's own environment is not read without it)."
            )
        if u.env_var:  # the server's own environment variable: its value decides the pair
            where += f"the server's {shown(u.env_var)} is not known: "
            fix += f" Or give the server's {shown(u.env_var)} with --{inst.role}-env FILE."
        out.append(finding("unresolved-variable", Severity.UNCHECKED, f"{where}{what}", fix, u.location))
    return out


def _once(cache: dict[tuple, Any], inst: Instance, table: str | None, compute: Callable[[], _T]) -> _T:
    """``compute()`` once per argv (per instance for a pair file's own parser) and release
    ``table``: its result, or the ``InputError`` it raised, is kept in ``cache`` and
    returned (raised) again on the next call."""
    key = (id(inst) if getattr(inst, "parse_for", None) else tuple(inst.argv), table)
    hit = cache.get(key)
    if hit is None:
        try:
            hit = compute()
        except InputError as exc:
            hit = exc
        cache[key] = hit
    if isinstance(hit, InputError):
        raise hit
    return hit


def parsed_flags(inst: Instance, caches: Caches, table: str | None = None) -> dict[str, Any]:
    """``inst``'s flags (dest -> value) as release ``table``'s own argument parser reads them
    (default: the newest modeled), cached per argv and release. Raises ``InputError``
    (``ArgparseRefusal``) where that parser refuses them: the release stage narrows the
    side's window with it."""

    def parse() -> dict[str, Any]:
        from kvcheck.sglang.flags import FlagTable
        from kvcheck.sources.redact import collect_secrets, register_secrets, secrets_from_argv

        # Before anything can echo a token (an error line quoting a bad value): every
        # secret the launch line or its environment holds is scrubbed from all output.
        register_secrets(secrets_from_argv(inst.argv) | collect_secrets(dict(inst.env)))
        custom = getattr(inst, "parse_for", None)  # a pair file read by kvcheck.cluster.pair_input
        if custom is not None:
            args = dict(custom(table or FlagTable.load().version))
        else:
            source = f"{inst.location} ({inst.name})"
            args = (FlagTable.load(table) if table else FlagTable.load()).parse_argv(list(inst.argv), source)
        args.pop("config", None)
        return args

    return _once(caches.flags, inst, table, parse)


def _parses(inst: Instance, caches: Caches, table: str) -> bool:
    try:
        _parse(inst, caches, table)
        return True
    except InputError:
        return False


def _parse(inst: Instance, caches: Caches, table: str | None = None) -> tuple[dict[str, Any], Any, str]:
    """(args dest -> value, typed ServerArgs, class-key dump) of ``inst`` read with release
    ``table``'s flags. Raises ``InputError``: the parser's refusal, or kvcheck's own typing
    refusing a value (a page size of 0: bad input, exit 2)."""

    def parse() -> tuple[dict[str, Any], Any, str]:
        from kvcheck.sglang.args import build_server_args

        args = parsed_flags(inst, caches, table)
        typed = build_server_args(args, f"{inst.location} ({inst.name})")
        return args, typed, repr(sorted(typed.model_dump(exclude=NOT_IN_CLASS_KEY).items()))

    return _once(caches.parsed, inst, table, parse)


def _resolve_model(
    name: str | None,
    inst: Instance,
    opts: ClusterOptions,
    caches: Caches,
    *,
    draft: bool = False,
    overrides: Any = None,
    override: Path | None = None,
):
    """(ModelConfig or None, source text, id) for ``name``, cached; ``overrides`` is the
    instance's ``--json-model-override-args`` (applied before parsing, as SGLang does)."""
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sources.models import resolve_model_config

    base = Path(inst.location.file).parent
    override = override or (None if draft else opts.model_config)
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


def read_instance(inst: Instance, opts: ClusterOptions, caches: Caches) -> InstanceResult:
    ir = InstanceResult(inst)
    if inst.unresolved:
        ir.findings += _unresolved_findings(inst)
        if any(u.flag for u in inst.unresolved):
            from kvcheck.release import manifest

            if not any(_parses(inst, caches, v) for v in reversed(manifest.pd_releases())):
                # the unresolved value is what does not parse: unchecked, not bad input
                ir._key = ("blocked", inst.role, id(inst))  # type: ignore[attr-defined]
                return ir
    if inst.read_notes:
        from kvcheck.cluster.pipeline import PROBLEM_SEVERITY

        ir.findings += [
            finding(n.id, PROBLEM_SEVERITY.get(n.id, Severity.UNCHECKED), n.message, n.fix, n.location)
            for n in inst.read_notes
        ]
    hidden = getattr(inst, "args_hidden", None)
    if hidden is not None:
        # a --config file kvcheck could not take: what the line gives is known, the rest
        # is not; the instance's pairs are unchecked (no side on guessed args) and the
        # cluster checks take only the flags the line gives (``InstanceResult.known_arg``)
        from kvcheck.cluster.pipeline import PROBLEM_SEVERITY

        ir.args_partial = True
        ir.findings.append(
            finding(
                hidden.id,
                PROBLEM_SEVERITY.get(hidden.id, Severity.UNCHECKED),
                f"{inst.name}: {hidden.message}",
                hidden.fix or "Give kvcheck a copy of the file (--config-file IMAGE_PATH=LOCAL_PATH).",
                hidden.location,
            )
        )
    pre = getattr(inst, "prebuilt_side", None)
    if pre is not None:  # a live server or snapshot, read by kvcheck.sources.live
        ir.args, ir.release, ir.release_source = dict(pre.raw_args), pre.sglang_version, pre.version_source
        ir.model, ir.model_source = pre.args.model_path, "live server"
        ir._key, ir._prebuilt = ("prebuilt", id(inst)), pre  # type: ignore[attr-defined]
        ir.findings += _live_release_disagreement(inst, pre, opts)
        return ir
    sig = (
        inst.role,
        id(inst) if getattr(inst, "parse_for", None) else tuple(inst.argv),
        tuple(map(repr, inst.release_clues)),
        inst.image,
        inst.gpu_type,
        tuple(sorted(inst.env.items())),
        inst.location.file,
        getattr(inst, "model", None),
        bool(inst.unresolved),
        tuple(sorted({u.env_var for u in inst.unresolved if u.env_var})),
        getattr(inst, "args_hidden", None) is not None,
    )
    derived = caches.argv.get(sig)
    if derived is None:
        try:
            derived = caches.argv[sig] = _derive(inst, opts, caches)
        except Refused as exc:
            return refused(ir, exc.sr)
        except Unmodeled as exc:
            return unmodeled(ir, exc.sr, exc.why)
    ir.args, ir.release, ir.release_source = derived.args, derived.release, derived.release_source
    ir.model, ir.model_source = derived.model, derived.model_source
    model_unset = any(u.flag and u.flag.split("=", 1)[0] in ("--model-path", "--model") for u in inst.unresolved)
    for fid, sev, msg, fix, flag in derived.notes:
        if (
            fid == "unknown-model"
            and flag == "--model-path"
            and (
                model_unset
                or (
                    "no --model-path given" in msg
                    and any(u.flag is None and u.env_var is None for u in inst.unresolved)
                )
            )
        ):
            # `--model-path ${MODEL_PATH}` unset (or `sglang serve <model_path>`, an unset
            # $ARGS that may hold it): its unresolved-variable says it, once
            continue
        ir.findings.append(
            finding(
                fid, sev, f"{inst.name}: {msg}", fix, (inst.arg_locations.get(flag) if flag else None) or inst.location
            )
        )
    ir._key, ir._build = derived.key, derived.build  # type: ignore[attr-defined]
    if inst.unresolved:  # its own class: the finding names this instance's variable
        ir._key = derived.key + (("unresolved", id(inst)),)  # type: ignore[attr-defined]
    return ir


def _live_release_disagreement(inst: Instance, side: Any, opts: ClusterOptions) -> list[Located]:
    """``release-clues-disagree`` (warning) for a live server or snapshot whose own
    ``/server_info`` version, a release kvcheck models, is not the one ``--sglang-version``
    (or the per-side option) names: the server's word is the stronger clue (it is the code
    that runs), so the side is judged as its own release and the option is set aside, said
    here. (A version kvcheck does not model yields to the option: ``live-version`` says so.)"""
    from kvcheck.sglang.releases import parse_release

    per_side = opts.prefill_sglang_version if inst.role == "prefill" else opts.decode_sglang_version
    option = f"--{inst.role}-sglang-version" if per_side else "--sglang-version"
    given = per_side or opts.sglang_version
    reported = (side.live or {}).get("version")
    if not given or not reported or side.version_source == option or side.sglang_version != reported:
        return []
    named = parse_release(given) or given
    if named == reported:
        return []
    return [
        finding(
            "release-clues-disagree",
            Severity.WARNING,
            f"{inst.name}: {option} {given} names another release than the server reports (SGLang {reported}, "
            f"{side.version_source}); the {inst.role} is judged as SGLang {reported}, the running server's own "
            "version",
            f"Drop {option} for a live server or snapshot (its /server_info version decides), or read the server "
            "that runs the release you meant.",
            inst.location,
        )
    ]


def _clues(inst: Instance, opts: ClusterOptions) -> list:
    """The release clues of ``inst``: what its input says (``clues_for_instance``), and
    ``--sglang-version`` / the per-side option (the strongest)."""
    from kvcheck.sources.release_clues import clue_from_cli, clues_for_instance

    clues = list(clues_for_instance(inst))
    per_side = opts.prefill_sglang_version if inst.role == "prefill" else opts.decode_sglang_version
    cli = clue_from_cli(per_side, f"--{inst.role}-sglang-version") if per_side else clue_from_cli(opts.sglang_version)
    if cli is not None:
        clues.append(cli)
    return clues


def _derive(inst: Instance, opts: ClusterOptions, caches: Caches) -> _Derived:
    from kvcheck.release import manifest
    from kvcheck.release.window import side_window
    from kvcheck.sides import kv_relevant_env

    notes: list[tuple] = []
    options = option_words(inst)
    sr = side_window(_clues(inst, opts), lambda v: parsed_flags(inst, caches, v), options)
    if sr.refusal is not None:
        raise Refused(sr)
    if sr.problem is not None:
        # A release kvcheck does not model (or cannot read): never judged with another
        # release's answers. Its flags are read with the newest table that reads them
        # (the unknown-release check makes every pair with it unchecked).
        table = None
        for v in reversed(manifest.flag_releases()):
            try:
                parsed_flags(inst, caches, v)
                table = v
                break
            except InputError:
                continue
        if table is None:
            sr.refused_on = manifest.flag_releases()
            try:
                parsed_flags(inst, caches, manifest.NEWEST)
            except InputError as exc:
                sr.refusal = (manifest.NEWEST, exc)
            why = sr.older or (unmodeled_reading(sr, options) if sr.refusal is not None else None)
            if why is not None:
                raise Unmodeled(sr, why)
            raise Refused(sr)
        release, release_source = sr.named, sr.problem
    else:
        table = sr.releases[-1]
        release, release_source = sr.releases[0] if sr.pinned else None, sr.how
    if sr.conflict:
        notes.append(
            (
                "release-clues-disagree",
                Severity.WARNING,
                sr.conflict,
                "Make the image tag, recipe pins and --sglang-version name one release.",
                None,
            )
        )
    args, typed, dump = _parse(inst, caches, table)
    model_path = typed.model_path or getattr(inst, "model", None)  # srt-slurm's model.path alias
    if typed.model_path is None and model_path:
        args = {**args, "model_path": model_path}
    overrides = args.get("json_model_override_args")
    override = opts.prefill_model_config if inst.role == "prefill" else opts.decode_model_config
    cfg, src, mid = _resolve_model(model_path, inst, opts, caches, overrides=overrides, override=override)
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
        note = _unknown_model(model_path, "--model-path", src)
        named = tuple(getattr(inst, "model_named", ()) or ())
        if named and named[0] != model_path:
            from kvcheck.sources.limits import clip

            # the file names a hub id that kvcheck's catalog does not hold: say which, so
            # the reader can tell "named, not in the catalog" from "named nowhere"
            note = (
                note[0],
                note[1],
                f"{note[2]}; the file names {clip(named[0])!r} ({named[1]})"
                + ("" if "; not used: " in named[1] else ", which is not in kvcheck's catalog either"),
                f"{note[3]} (kvcheck's catalog holds only configs read from public copies; kvcheck never guesses a "
                "geometry)",
                note[4],
            )
        notes.append(note)
    draft_cfg, draft_id, draft_missing = None, None, False
    if (
        typed.has_draft_worker
        and (typed.speculative_draft_model_path or opts.draft_model_config)
        and (opts.draft_model_config is not None or typed.speculative_draft_model_path != model_path)
    ):
        draft_cfg, dsrc, draft_id = _resolve_model(
            typed.speculative_draft_model_path,
            inst,
            opts,
            caches,
            draft=True,
            overrides=overrides,
            override=opts.draft_model_config,
        )
        if draft_cfg is None:
            draft_missing = True
            notes.append(_unknown_model(typed.speculative_draft_model_path, "--speculative-draft-model-path", dsrc))
    cli_gpu = (opts.prefill_gpu if inst.role == "prefill" else opts.decode_gpu) or opts.gpu
    gpu = cli_gpu or inst.gpu_type
    if cli_gpu and inst.gpu_type:
        disagree = _gpu_disagreement(cli_gpu, inst.gpu_type, inst.gpu_source, inst.role, opts)
        if disagree is not None:
            notes.append(disagree)
    if gpu is not None and cli_gpu is None:
        from kvcheck.sglang.gpu import resolve_gpu

        try:
            resolve_gpu(gpu, source=str(inst.location), field="gpu")
        except InputError:
            notes.append(
                (
                    "unknown-gpu",
                    Severity.UNCHECKED,
                    f"GPU {gpu!r} ({inst.gpu_source or 'manifest'}) is not one kvcheck knows; page sizes, "
                    "attention backends and start-up refusals depend on it, so the pair is not decided on a GPU "
                    "it assumed",
                    f"Pass --{inst.role}-gpu NAME (or --gpu) with the GPU that label stands for if kvcheck knows "
                    "it (h100, h200, b200, gb200, ... or smXX); a GPU kvcheck does not model is checked on a staging "
                    "deployment.",
                    None,
                )
            )
            gpu = None
    platform = non_cuda_platform(inst, args, gpu)
    if platform is not None:
        notes.append(
            (
                "unknown-gpu",
                Severity.UNCHECKED,
                f"the server runs SGLang on {platform[0]} ({platform[1]}); kvcheck restates SGLang's CUDA start-up, "
                "attention "
                "backends and page sizes only, so neither a Hopper nor a Blackwell answer holds for it",
                "Check this pair on a staging deployment, or pass --gpu NAME if the server in fact runs on an NVIDIA "
                "GPU.",
                None,
            )
        )
    env = tuple(sorted((k, v) for k, v in inst.env.items() if kv_relevant_env(k)))
    # A KV-relevant variable of the server's environment whose value is not known (its
    # unresolved-variable finding says which): no side is built on a guessed value
    env_unknown = any(u.env_var for u in inst.unresolved)
    args_hidden = getattr(inst, "args_hidden", None) is not None  # a --config not read: args not all known
    unchecked = cfg is None or draft_missing or env_unknown or args_hidden
    # the releases it starts on, and those on which it refuses a flag's value at start-up
    window = release if sr.problem is not None else (sr.releases, tuple(sorted(sr.value_refused)))
    key = (
        inst.role,
        mid,
        draft_id,
        dump,
        env,
        gpu,
        window,
        str(args.get("load_balance_method")),
        "unchecked" if unchecked else "",
    )
    return _Derived(
        args,
        release,
        release_source,
        model_path,
        src or "not found",
        (cfg, draft_cfg, gpu, dict(inst.env), unchecked, sr, table),
        key,
        notes,
    )


def _gpu_option(role: str, opts: ClusterOptions) -> str:
    """The option that named ``role``'s GPU (``--prefill-gpu`` over ``--gpu``)."""
    return f"--{role}-gpu" if (opts.prefill_gpu if role == "prefill" else opts.decode_gpu) else "--gpu"


def _gpu_disagreement(cli: str, named: str, source: str, role: str, opts: ClusterOptions) -> tuple | None:
    """A ``gpu-clues-disagree`` note when the GPU option and the input's own GPU are two
    GPUs (as kvcheck resolves them: ``h100`` and ``H100-SXM`` are one; a label kvcheck
    cannot place is another GPU too); None when they agree. The option decides."""
    from kvcheck.sglang.gpu import normalize_gpu_name, resolve_gpu

    try:
        a = resolve_gpu(cli).name
    except InputError:
        return None  # the option itself is refused elsewhere (exit 2)
    if normalize_gpu_name(named) == a:
        return None
    option = _gpu_option(role, opts)
    return (
        "gpu-clues-disagree",
        Severity.WARNING,
        f"{option} {cli} names another GPU than the input does ({named}, {source or 'the deployment file'}); the "
        f"{role} is checked on {a}, as the option says",
        f"Make {option} and the input name one GPU (drop the option if the input's {named} is where the {role} runs).",
        None,
    )


_PLATFORM_ENV = {
    "HIP_VISIBLE_DEVICES": "ROCm (AMD GPUs)",
    "ROCR_VISIBLE_DEVICES": "ROCm (AMD GPUs)",
    "SGLANG_USE_AITER": "ROCm (AMD GPUs)",
    "ASCEND_RT_VISIBLE_DEVICES": "Ascend NPUs",
    "ZE_AFFINITY_MASK": "Intel XPUs",
}
_PLATFORM_DEVICE = {"npu": "Ascend NPUs", "xpu": "Intel XPUs", "hpu": "Gaudi HPUs", "cpu": "CPUs", "mps": "Apple MPS"}


def non_cuda_platform(inst: Any, args: dict[str, Any], gpu: str | None) -> tuple[str, str] | None:
    """(platform, the clue) when the instance runs SGLang off CUDA, else None.

    Clues, in order: a GPU kvcheck resolved to a non-NVIDIA vendor (``mi300x``); SGLang's
    ``--device`` (``npu``, ``xpu``, ``hpu``, ``cpu``; ``cuda``/unset is CUDA); the image
    (``rocm`` in its name or tag, as ``rocm/sgl-dev:...`` and ``lmsysorg/sglang:...-rocm630``;
    ``npu``/``ascend``; ``xpu``); the platform's own device variables (``HIP_VISIBLE_DEVICES``,
    ``SGLANG_USE_AITER``, ``ASCEND_RT_VISIBLE_DEVICES``). An explicit NVIDIA GPU (``--gpu``,
    a manifest's node selector) wins over the image and env clues."""
    from kvcheck.sglang.gpu import resolve_gpu

    if gpu is not None:
        try:
            g = resolve_gpu(gpu)
        except InputError:
            g = None
        if g is not None:
            return (f"{g.vendor.upper()} GPUs (ROCm)", f"GPU {gpu}") if g.vendor != "nvidia" else None
    device = str(args.get("device") or "").lower()
    if device in _PLATFORM_DEVICE:
        return _PLATFORM_DEVICE[device], f"--device {device}"
    image = str(getattr(inst, "image", None) or "")
    low = image.lower()
    if re.search(r"(^|[/:_.-])rocm", low):
        return "ROCm (AMD GPUs)", f"image {image}"
    if re.search(r"(^|[/:_.-])(npu|ascend)", low):
        return "Ascend NPUs", f"image {image}"
    if re.search(r"(^|[/:_.-])xpu", low):
        return "Intel XPUs", f"image {image}"
    env = getattr(inst, "env", None) or {}
    for key, platform in _PLATFORM_ENV.items():
        if key in env:
            return platform, f"env {key}"
    return None


def _unknown_model(name: str | None, flag: str, why: str = "") -> tuple:
    """An ``unknown-model`` note (see ``_Derived.notes``)."""
    from kvcheck.sources.limits import clip

    option = "--draft-model-config" if flag == "--speculative-draft-model-path" else "--model-config"
    if name:
        name = clip(name)  # a 10 MB model path is named, not echoed whole
    if why:
        return (
            "unknown-model",
            Severity.UNCHECKED,
            f"model {name!r} ({flag}): {why}",
            f"Pass {option} FILE with the model's config.json.",
            flag,
        )
    if not name:
        return (
            "unknown-model",
            Severity.UNCHECKED,
            f"no {flag} given, so there is no model config to read",
            f"Add {flag}, or pass --model-config FILE.",
            flag,
        )
    return (
        "unknown-model",
        Severity.UNCHECKED,
        f"model {name!r} ({flag}) has no config.json kvcheck can read: not a local directory, not in a Hugging Face "
        "cache, not in kvcheck's catalog",
        f"Pass {option} FILE with the model's config.json, or --models DIR holding a Hugging Face cache "
        "(models--ORG--NAME/snapshots/REV/config.json).",
        flag,
    )
