"""RBG ``RoleBasedGroup`` roles -> pod specs, composed the way RBG's controller does, and
the strategic merge patch that composition (and other CRDs' template patches) uses.

RBG (sgl-project/rbg) builds each role's pod template from one of:

* an inline template: v1alpha1 ``role.template``; v1alpha2 ``standalonePattern.template``
  / ``leaderWorkerPattern.template`` (``TemplateSource``);
* a role template: ``templateRef: {name, patch}`` naming one of ``spec.roleTemplates``
  (v1alpha2 ``TemplateSource.TemplateRef``; v1alpha1 ``role.templateRef`` with
  ``role.templatePatch``). ``RoleSpec.GetResolvedTemplate`` (api/workloads/v1alpha2/
  helper.go) finds the template and applies the patch with
  ``strategicpatch.StrategicMergePatch(base, patch, &corev1.PodTemplateSpec{})``;
* for a leader/worker role, the leader and worker templates are that base with
  ``leaderTemplatePatch`` / ``workerTemplatePatch`` (v1alpha2) or ``patchLeaderTemplate``
  / ``patchWorkerTemplate`` (v1alpha1 ``leaderWorkerSet``) applied the same way
  (pkg/reconciler/lws_reconciler.go, ``applyStrategicMergePatch``);
* ``customComponentsPattern.components[]`` (v1alpha1 ``components``): one pod template
  per component, ``size`` pods each.

``strategic_merge`` restates Kubernetes' strategic merge for a PodTemplateSpec: maps merge
key by key; the lists that carry a ``patchMergeKey`` in the core/v1 types merge item by
item on that key (``containers``/``initContainers``/``volumes``/``env``/... by ``name``,
``ports`` by ``containerPort``, ``volumeMounts`` by ``mountPath``); every other list,
``command`` and ``args`` included, is replaced whole; a ``null`` deletes the key;
``$patch: replace`` replaces a map, ``$patch: delete`` removes a map or a list item.
Lines are kept: a value taken from the patch carries the patch's line.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kvcheck.sources.deployments.yamlnodes import LMap, LSeq, sub_map

# core/v1 fields with patchStrategy=merge and their patchMergeKey
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "hostAliases": "ip",
    "resourceClaims": "name",
}


def _copy(v: Any) -> Any:
    return copy.deepcopy(v)


def _strip_directives(v: Any) -> Any:
    if isinstance(v, dict):
        out: Any = LMap() if isinstance(v, LMap) else {}
        if isinstance(v, LMap):
            out.line = v.line
        for k, x in v.items():
            if isinstance(k, str) and k.startswith("$"):
                continue
            out[k] = _strip_directives(x)
            if isinstance(v, LMap) and k in v.lines:
                out.lines[k] = v.lines[k]
        return out
    if isinstance(v, list):
        items = [_strip_directives(x) for x in v if not (isinstance(x, dict) and x.get("$patch") == "delete")]
        if isinstance(v, LSeq):
            seq = LSeq(items)
            seq.line = v.line
            seq.lines = [
                ln
                for x, ln in zip(v, v.lines, strict=False)
                if not (isinstance(x, dict) and x.get("$patch") == "delete")
            ]
            return seq
        return items
    return copy.deepcopy(v)


def _merge_list(base: list, patch: list, key: str) -> list:
    merged = LSeq([_copy(x) for x in base])
    merged.line = getattr(base, "line", 0)
    merged.lines = list(getattr(base, "lines", [])) + [0] * (len(base) - len(getattr(base, "lines", [])))
    plines = getattr(patch, "lines", [])
    for i, item in enumerate(patch):
        pline = plines[i] if i < len(plines) else getattr(patch, "line", 0)
        if not isinstance(item, dict) or key not in item:
            merged.append(_strip_directives(item))
            merged.lines.append(pline)
            continue
        idx = next((j for j, x in enumerate(merged) if isinstance(x, dict) and x.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del merged[idx]
                del merged.lines[idx]
            continue
        if idx is None:
            merged.append(_strip_directives(item))
            merged.lines.append(pline)
        else:
            merged[idx] = strategic_merge(merged[idx], item)
    return merged


def strategic_merge(base: Any, patch: Any) -> Any:
    """Kubernetes' strategic merge of ``patch`` onto ``base`` (a PodTemplateSpec, a pod
    spec or any part of one); neither argument is changed."""
    if patch is None:
        return _copy(base)
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return _strip_directives(patch)
    if patch.get("$patch") == "replace":
        return _strip_directives(patch)
    if patch.get("$patch") == "delete":
        return None
    out = _copy(base)
    if not isinstance(out, LMap):
        o = LMap(out)
        o.line = getattr(patch, "line", 0)
        out = o
    plines = getattr(patch, "lines", {})
    for k, v in patch.items():
        if isinstance(k, str) and k.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys: ordering and pruning hints
        if v is None:
            out.pop(k, None)
            continue
        bv = out.get(k)
        if isinstance(v, dict) and isinstance(bv, dict):
            res = strategic_merge(bv, v)
            if res is None:
                out.pop(k, None)
                continue
            out[k] = res
        elif isinstance(v, list) and isinstance(bv, list) and k in MERGE_KEYS:
            out[k] = _merge_list(bv, v, MERGE_KEYS[k])
        else:
            out[k] = _strip_directives(v)
        if k in plines:
            out.lines[k] = plines[k]
    return out


@dataclass
class RoleSpec:
    """One role (or component) of a RoleBasedGroup, resolved: the leader's PodTemplateSpec
    (or the only pod's), the workers' (None for a single-pod role), copies and pods."""

    name: str
    leader: Any
    worker: Any
    replicas: int
    nodes: int
    line: int


def _int(v: Any, default: int) -> int:
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return default


def _templates(spec: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in spec.get("roleTemplates") or []:
        if isinstance(t, dict) and t.get("name"):
            out[str(t["name"])] = t.get("template")
    return out


def _source(holder: Any, templates: dict[str, Any], extra_patch: Any = None) -> Any:
    """A ``TemplateSource`` (inline ``template`` or ``templateRef``) -> PodTemplateSpec."""
    if not isinstance(holder, dict):
        return None
    if isinstance(holder.get("template"), dict):
        return holder["template"]
    ref = holder.get("templateRef")
    if isinstance(ref, dict) and ref.get("name") is not None:
        base = templates.get(str(ref["name"]))
        if base is None:
            return None
        patch = ref.get("patch") if ref.get("patch") is not None else extra_patch
        return strategic_merge(base, patch) if patch is not None else _copy(base)
    return None


def roles(spec: dict, group_name: str, default_line: int) -> list[RoleSpec]:
    """``spec.roles[]`` of a RoleBasedGroup (v1alpha1 or v1alpha2) -> resolved roles.
    A role whose template cannot be found is left out (it launches nothing kvcheck can see)."""
    templates = _templates(spec)
    out: list[RoleSpec] = []
    for role in spec.get("roles") or []:
        if not isinstance(role, dict):
            continue
        rname = f"{group_name}/{role.get('name', '?')}"
        reps = _int(role.get("replicas"), 1)
        line = getattr(role, "line", default_line)
        # v1alpha1: role.template, or role.templateRef + role.templatePatch
        role_base = _source(role, templates, role.get("templatePatch"))
        lwp = sub_map(role, "leaderWorkerPattern", None)
        lws = sub_map(role, "leaderWorkerSet", None)
        comps = None
        if isinstance(role.get("customComponentsPattern"), dict):
            comps = role["customComponentsPattern"].get("components")
        elif isinstance(role.get("components"), list):
            comps = role["components"]
        if lwp is not None or lws is not None:
            p = lwp if lwp is not None else lws
            base = _source(p, templates) or role_base
            lp = p.get("leaderTemplatePatch") or p.get("patchLeaderTemplate") or p.get("leaderPatch")
            wp = p.get("workerTemplatePatch") or p.get("patchWorkerTemplate") or p.get("workerPatch")
            size = _int(p.get("size"), 1)
            leader = strategic_merge(base, lp) if lp is not None else base
            worker = strategic_merge(base, wp) if wp is not None else base
            out.append(RoleSpec(rname, leader, worker if size > 1 else None, reps, max(1, size), line))
        elif isinstance(comps, list) and comps:
            for comp in comps:
                if isinstance(comp, dict):
                    tmpl = _source(comp, templates)
                    out.append(
                        RoleSpec(
                            f"{rname}/{comp.get('name', '?')}",
                            tmpl,
                            None,
                            reps * max(1, _int(comp.get("size"), 1)),
                            1,
                            getattr(comp, "line", line),
                        )
                    )
        else:
            sp = sub_map(role, "standalonePattern", None)
            tmpl = _source(sp, templates) if sp is not None else None
            out.append(RoleSpec(rname, tmpl or role_base, None, reps, 1, line))
    return out
