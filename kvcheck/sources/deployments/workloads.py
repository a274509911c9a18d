"""The Kubernetes workload kinds kvcheck reads -> ``Group``s (one instance definition each:
a leader pod spec, an optional worker pod spec, replicas, nodes, overrides from the CRD),
for ``kvcheck.sources.deployments.kubernetes`` to read the containers of.

Objects read (single or multi-document YAML, ``kind: List`` included):

* ``Pod``; ``Deployment``, ``StatefulSet``, ``ReplicaSet``, ``DaemonSet`` (``spec.replicas``,
  ``spec.template.spec``); ``Job`` (``spec.parallelism``);
* ``LeaderWorkerSet`` (leaderworkerset.x-k8s.io): ``spec.replicas`` groups of
  ``spec.leaderWorkerTemplate.size`` pods, the leader from ``leaderTemplate`` (else the
  worker template), the others from ``workerTemplate``: one instance of ``size`` nodes;
* Dynamo ``DynamoGraphDeployment`` (nvidia.com): ``spec.services.<name>`` with
  ``replicas``, ``multinode.nodeCount``, ``resources.limits.gpu``, ``envs`` and
  ``extraPodSpec`` (pod fields plus ``mainContainer``);
* RBG ``RoleBasedGroup`` (workloads.x-k8s.io v1alpha1/v1alpha2): ``spec.roles[]`` with
  ``replicas`` and ``template`` / ``standalonePattern.template`` /
  ``leaderWorkerPattern`` (``size``, ``template``, leader/worker template patches) /
  v1alpha1 ``leaderWorkerSet`` (``size``, ``patchLeaderTemplate``/``patchWorkerTemplate``);
* OME ``ClusterServingRuntime`` / ``ServingRuntime`` (ome.io): ``spec.engineConfig``
  (prefill or single engine), ``spec.decoderConfig``, ``spec.routerConfig``, each with a
  ``runner`` container, optional ``leader``/``worker`` (``worker.size`` extra pods) and
  pod fields, ``minReplicas``;
* AIBrix ``StormService``: ``spec.template.spec.roles[]`` (``replicas``, ``template``);
* LWS ``DisaggregatedSet`` (disaggregatedset.x-k8s.io; llm-d's SGLang P/D guide):
  ``spec.roles[]``, each ``name`` + a LeaderWorkerSet ``spec``, times ``spec.slices``;
* anything else (llm-d charts' output, other CRDs): every pod spec (a mapping with a
  ``containers`` list) found inside, with the nearest ``replicas`` above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcheck.sources.deployments import rbg
from kvcheck.sources.deployments.rbg import _int  # an integer field of a manifest, read as RBG reads it
from kvcheck.sources.deployments.yamlnodes import LMap, LSeq, sub_map

_POD_KINDS = {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job"}


@dataclass
class Group:
    """One instance definition: a leader pod spec (node rank 0), an optional worker pod
    spec (ranks 1..nodes-1), how many copies, and overrides from the CRD."""

    kind: str
    name: str
    leader: Any
    worker: Any = None
    replicas: int = 1
    nodes: int = 1
    gpus: int | None = None
    extra_env: Any = None
    line: int = 0
    containers_key: str = "containers"


def _pod_spec(template: Any) -> Any:
    """A PodTemplateSpec (``{metadata, spec}``) or a pod spec -> the pod spec."""
    if isinstance(template, dict):
        if isinstance(template.get("spec"), dict) and "containers" in template["spec"]:
            return template["spec"]
        if "containers" in template:
            return template
        if isinstance(template.get("spec"), dict):
            return template["spec"]
    return None


def _leader_worker_set(name: str, lws: Any, line: int, copies: int = 1) -> Group:
    """A LeaderWorkerSet ``spec`` (leaderworkerset.x-k8s.io; also each role of a
    DisaggregatedSet) -> its ``Group``: ``copies`` x ``replicas`` groups of
    ``leaderWorkerTemplate.size`` pods, the leader from ``leaderTemplate`` (else the worker
    template), the other pods from ``workerTemplate``."""
    lwt = lws.get("leaderWorkerTemplate") or {}
    worker = _pod_spec(lwt.get("workerTemplate"))
    leader = _pod_spec(lwt.get("leaderTemplate")) or worker
    nodes = _int(lwt.get("size"), 1)
    return Group(
        "LeaderWorkerSet",
        name,
        leader,
        worker if nodes > 1 else None,
        replicas=copies * _int(lws.get("replicas"), 1),
        nodes=nodes,
        line=line,
    )


def groups(obj: Any) -> list[Group]:
    """Instance definitions inside one Kubernetes object."""
    if not isinstance(obj, dict):
        return []
    kind = str(obj.get("kind", ""))
    meta = sub_map(obj, "metadata")
    name = str(meta.get("name", kind or "object"))
    spec = sub_map(obj, "spec")
    line = obj.line if isinstance(obj, LMap) else 0
    if kind == "List" or (isinstance(obj.get("items"), list) and not spec):
        out: list[Group] = []
        for item in obj.get("items") or []:
            out.extend(groups(item))
        return out
    if kind == "Pod":
        return [Group(kind, name, spec, line=line)]
    if kind in _POD_KINDS:
        reps = _int(spec.get("parallelism" if kind == "Job" else "replicas"), 1)
        return [Group(kind, name, _pod_spec(spec.get("template")), replicas=reps, line=line)]
    if kind == "LeaderWorkerSet":
        return [_leader_worker_set(name, spec, line)]
    if kind == "DisaggregatedSet":
        # LWS's DisaggregatedSet (disaggregatedset.x-k8s.io/v1, api/disaggregatedset/v1):
        # ``spec.roles[]`` each a LeaderWorkerSet spec under its ``name``; ``spec.slices``
        # (default 1) independent copies of the whole role topology
        out = []
        slices = _int(spec.get("slices"), 1)
        for role in spec.get("roles") or []:
            if not isinstance(role, dict):
                continue
            rspec: dict[str, Any] = role["spec"] if isinstance(role.get("spec"), dict) else {}
            out.append(
                _leader_worker_set(f"{name}/{role.get('name', '?')}", rspec, getattr(role, "line", line), copies=slices)
            )
        return out
    if kind == "DynamoGraphDeployment":
        out = []
        services = sub_map(spec, "services")
        for sname, svc in services.items():
            if not isinstance(svc, dict):
                continue
            eps = sub_map(svc, "extraPodSpec", LMap())
            pod = LMap({k: v for k, v in eps.items() if k != "mainContainer"})
            pod.line = getattr(eps, "line", 0)
            main = eps.get("mainContainer")
            containers = LSeq([main] if isinstance(main, dict) else [])
            containers.lines = [getattr(main, "line", 0)]
            pod["containers"] = containers + [c for c in (eps.get("containers") or []) if isinstance(c, dict)]
            limits = (
                ((svc.get("resources") or {}).get("limits") or {}) if isinstance(svc.get("resources"), dict) else {}
            )
            gpus = _int(limits.get("gpu"), -1) if isinstance(limits, dict) else -1
            nodes = _int(
                ((svc.get("multinode") or {}) if isinstance(svc.get("multinode"), dict) else {}).get("nodeCount"), 1
            )
            out.append(
                Group(
                    kind,
                    f"{name}/{sname}",
                    pod,
                    pod if nodes > 1 else None,
                    replicas=_int(svc.get("replicas"), 1),
                    nodes=nodes,
                    gpus=gpus if gpus >= 0 else None,
                    extra_env=svc.get("envs"),
                    line=getattr(svc, "line", line),
                )
            )
        return out
    if kind == "RoleBasedGroup":
        # roles composed as RBG's controller does (inline templates, roleTemplates +
        # templateRef patches, leader/worker patches; see kvcheck.sources.deployments.rbg)
        return [
            Group(
                kind,
                r.name,
                _pod_spec(r.leader),
                _pod_spec(r.worker) if r.worker is not None else None,
                replicas=r.replicas,
                nodes=r.nodes,
                line=r.line,
            )
            for r in rbg.roles(spec, name, line)
        ]
    if kind in ("ClusterServingRuntime", "ServingRuntime"):
        out = []
        for key in ("engineConfig", "decoderConfig", "routerConfig"):
            cfg = spec.get(key)
            if not isinstance(cfg, dict):
                continue
            reps = _int(cfg.get("minReplicas"), 1)
            leader_cfg = sub_map(cfg, "leader", None)
            worker_cfg = sub_map(cfg, "worker", None)

            def pod_of(part: Any, runner_from: Any, cfg: Any = cfg) -> LMap:
                pod = LMap({k: v for k, v in cfg.items() if k not in ("runner", "leader", "worker")})
                pod.line = getattr(cfg, "line", 0)
                if isinstance(part, dict):
                    pod.update({k: v for k, v in part.items() if k not in ("runner", "size")})
                runner = runner_from.get("runner") if isinstance(runner_from, dict) else None
                cs = LSeq([runner] if isinstance(runner, dict) else [])
                cs.lines = [getattr(runner, "line", 0)]
                pod["containers"] = cs + [c for c in (pod.get("containers") or []) if isinstance(c, dict)]
                return pod

            if leader_cfg or worker_cfg:
                leader = pod_of(leader_cfg, leader_cfg if leader_cfg and leader_cfg.get("runner") else cfg)
                worker = pod_of(worker_cfg, worker_cfg) if worker_cfg else None
                nodes = 1 + _int((worker_cfg or {}).get("size"), 0)
                out.append(
                    Group(
                        kind,
                        f"{name}/{key}",
                        leader,
                        worker,
                        replicas=reps,
                        nodes=nodes,
                        line=getattr(cfg, "line", line),
                    )
                )
            else:
                out.append(
                    Group(kind, f"{name}/{key}", pod_of(None, cfg), replicas=reps, line=getattr(cfg, "line", line))
                )
        return out
    if kind == "StormService":
        out = []
        tmpl = sub_map(spec, "template")
        tspec = sub_map(tmpl, "spec")
        outer = _int(spec.get("replicas"), 1)
        for role in tspec.get("roles") or []:
            if isinstance(role, dict):
                size = _int(role.get("podGroupSize"), 1)
                pod = _pod_spec(role.get("template"))
                out.append(
                    Group(
                        kind,
                        f"{name}/{role.get('name', '?')}",
                        pod,
                        pod if size > 1 else None,
                        replicas=outer * _int(role.get("replicas"), 1),
                        nodes=size,
                        line=getattr(role, "line", line),
                    )
                )
        return out
    # anything else: every pod spec inside, with the nearest replicas above it
    out = []

    def visit(node: Any, reps: int, path: str) -> None:
        if isinstance(node, dict):
            reps = _int(node.get("replicas"), reps)
            if isinstance(node.get("containers"), list) and any(isinstance(c, dict) for c in node["containers"]):
                out.append(
                    Group(kind or "object", f"{name}{path}", node, replicas=reps, line=getattr(node, "line", line))
                )
                return
            for k, v in node.items():
                visit(v, reps, f"{path}/{k}" if k not in ("spec", "template") else path)
        elif isinstance(node, list):
            for v in node:
                visit(v, reps, path)

    visit(spec if spec else obj, 1, "")
    return out
