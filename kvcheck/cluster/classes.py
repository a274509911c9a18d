"""The classes stage of ``kvcheck.cluster.pipeline``: instances whose KV-relevant inputs
agree (typed args, env, GPU, model, release window) form one ``ClassResult``, with a
``Side`` built per release (and assumed GPU) on demand (``ClassResult.side_for``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcheck.cluster.instances import parsed_flags
from kvcheck.cluster.model import ClassResult, InstanceResult
from kvcheck.cluster.options import Caches, ClusterOptions


def group_classes(instances: list[InstanceResult], opts: ClusterOptions, caches: Caches) -> list[ClassResult]:
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
            pre = getattr(ir, "_prebuilt", None)
            build = getattr(ir, "_build", None)
            if pre is not None:
                cls.side = pre
                cls.window = _pinned_window(pre)
            elif build is not None and not build[4]:
                cls.window = build[5]
                cls.build_for = _side_builder(ir, caches, build)
                cls.side = cls.build_for(build[6])
        ir.class_id = cls.id
        cls.members.append(ir)
    return list(by_key.values())


def _pinned_window(side: Any) -> Any:
    """The ``SideRelease`` of a side read from a live server or snapshot (its
    ``/server_info`` version pins it), None when kvcheck does not model that release."""
    from kvcheck.release import manifest
    from kvcheck.release.window import SideRelease

    v = side.sglang_version
    if not manifest.is_modeled(v):
        return None
    return SideRelease(releases=(v,), pinned=True, how=side.version_source)


def _side_builder(ir: InstanceResult, caches: Caches, build: tuple):
    """``release -> Side`` for the class of ``ir``: its flags read with that release's
    parser and typed with that release's defaults, on the class's model and GPU."""
    from kvcheck.sglang.releases import ReleaseChoice
    from kvcheck.sources import build_side

    cfg, draft_cfg, gpu, env, _, sr, table = build
    inst = ir.instance
    model_path = ir.model

    def build_for(release: str, assumed_gpu: str | None = None):
        args = dict(ir.args or {}) if release == table else dict(parsed_flags(inst, caches, release))
        # The model the side is compared by was chosen once (``_derive``: --model-path, or
        # the model the file names when that path is inside the image); the same on every
        # release (it was only set on the newest table's args: the two sides of a window
        # then differed in --model-path on some releases, a false same-model unchecked).
        chosen = (ir.args or {}).get("model_path") or model_path
        if chosen:
            args["model_path"] = chosen
        if sr.problem is not None:
            choice = ReleaseChoice(sr.named, sr.problem, False, table, sr.problem)
        else:
            choice = ReleaseChoice(release, sr.how, True, release)
        side = build_side(
            inst.role,
            args,
            env,
            f"{inst.name} ({inst.location})",
            model=cfg,
            draft_model=draft_cfg,
            gpu=gpu or assumed_gpu,
            base=Path(inst.location.file).parent,
            release=choice,
            image=inst.image,
        )
        if gpu is None and assumed_gpu is not None:
            side.gpu_source = f"assumed for the GPU window: {assumed_gpu} (no GPU given)"
        elif inst.gpu_source and gpu is not None and gpu == inst.gpu_type and side.gpu_source == "--gpu":
            side.gpu_source = inst.gpu_source
        return side

    return build_for
