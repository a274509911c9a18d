"""Kubernetes manifests -> ``Deployment``: every workload whose containers launch SGLang.

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

A container's ``command`` + ``args`` are joined; ``$(VAR)`` references are expanded from
the container's ``env`` the way the kubelet does; a ``bash -c`` / ``sh -c`` script is read
as shell. GPU kind comes from ``nodeSelector`` / node affinity / toleration labels
(``nvidia.com/gpu.product``, ``cloud.google.com/gke-accelerator``, ...), GPUs per node
from ``nvidia.com/gpu`` / ``amd.com/gpu`` / Dynamo ``gpu`` limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcheck.sglang.gpu import normalize_gpu_name
from kvcheck.sources.deployments import rbg
from kvcheck.sources.deployments.addresses import rank_is_symbolic, set_node_rank
from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem
from kvcheck.sources.deployments.launch import env_unresolved, find_launches, instance_from_launch, take_launch
from kvcheck.sources.deployments.launch_options import option_value
from kvcheck.sources.deployments.router import link_router
from kvcheck.sources.deployments.shell import Word, placeholders
from kvcheck.sources.deployments.sourcing import non_pd_problem
from kvcheck.sources.deployments.variables import Scope, VarDef, container_env, expand
from kvcheck.sources.deployments.yamlnodes import LMap, LSeq, sub_map

_GPU_LABEL_KEYS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.family",
    "node.kubernetes.io/instance-type",
    "accelerator",
    "gpu-type",
    "gpu.type",
    "gputype",
    "karpenter.k8s.aws/instance-gpu-name",
    "amd.com/gpu.product-name",
)
# Cloud machine types / families whose name does not say the GPU (AWS EC2, GCP A-series).
_INSTANCE_GPU = (
    ("p6-b200", "b200"),
    ("p6e-gb200", "gb200"),
    ("p5en", "h200"),
    ("p5e", "h200"),
    ("p5", "h100"),
    ("p4de", "a100"),
    ("p4d", "a100"),
    ("g6e", "l40s"),
    ("g6", "l4"),
    ("g5", "a10g"),
    ("a4x-highgpu", "gb200"),
    ("a4-highgpu", "b200"),
    ("a3-ultragpu", "h200"),
    ("a3-megagpu", "h100"),
    ("a3-highgpu", "h100"),
    ("a3-edgegpu", "h100"),
    ("a2-ultragpu", "a100"),
    ("a2-highgpu", "a100"),
    ("g2-standard", "l4"),
)


def _gpu_name(value: str) -> str | None:
    """A label value -> kvcheck's GPU name: the GPU named in it, else a known machine type."""
    g = normalize_gpu_name(value)
    if g:
        return g
    v = value.strip().lower()
    for prefix, gpu in _INSTANCE_GPU:
        if v.startswith(prefix):  # longer prefixes are listed first (p5en before p5)
            return gpu
    return None


_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu", "habana.ai/gaudi")
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


_int = rbg._int  # an integer field of a manifest (replicas, size), read as RBG reads it


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


def _names_gpu(key: str) -> bool:
    """Whether a node label key names the GPU model (``nvidia.com/gpu.product``,
    ``amd.com/gpu.product-name``, a cloud's accelerator or instance type...), so that a
    value kvcheck cannot place is a GPU it does not know, never no GPU at all. (Other keys
    with ``gpu`` in them, ``nvidia.com/gpu.present: "true"``, only help when their value
    names a GPU.)"""
    k = key.lower()
    return any(k == g or k.endswith("/" + g) for g in _GPU_LABEL_KEYS) or k.endswith("/instance-type")


def _gpu_type(spec: Any) -> tuple[str | None, str]:
    """GPU kind from a pod spec's node selector, node affinity and tolerations.

    A label that names the GPU model (``_names_gpu``) with a value kvcheck cannot place
    (``amd.com/gpu.product-name: AMD-Instinct-MI999X``, a product kvcheck does not know) is
    returned as written: the pipeline reports it as ``unknown-gpu`` (unchecked, naming the
    label), never drops it for the Hopper/Blackwell window of a GPU not given. A known GPU
    named by any label wins over it."""
    if not isinstance(spec, dict):
        return None, ""
    unknown: tuple[str, str] | None = None
    sel = spec.get("nodeSelector")
    if isinstance(sel, dict):
        for k, v in sel.items():
            if isinstance(v, str) and (
                any(key in str(k).lower() for key in _GPU_LABEL_KEYS)
                or "gpu" in str(k).lower()
                or "instance-family" in str(k).lower()
                or "machine-family" in str(k).lower()
            ):
                g = _gpu_name(v)
                if g:
                    return g, f"nodeSelector {k}={v}"
                if unknown is None and _names_gpu(str(k)) and v.strip():
                    unknown = (v, f"nodeSelector {k}={v}")
    aff: Any = spec.get("affinity")  # YAML: read inside the try below
    terms: list[Any] = []
    try:
        na = aff["nodeAffinity"]
        req = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        terms.extend(req.get("nodeSelectorTerms") or [])
        for pref in na.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
            if isinstance(pref, dict) and isinstance(pref.get("preference"), dict):
                terms.append(pref["preference"])
    except (TypeError, KeyError, AttributeError):
        pass
    for term in terms:
        for expr in (term.get("matchExpressions") or []) if isinstance(term, dict) else []:
            if not isinstance(expr, dict) or expr.get("operator") not in ("In", None):
                continue
            key = str(expr.get("key", ""))
            vals = expr.get("values") or []
            if (
                "gpu" in key.lower()
                or "accelerator" in key.lower()
                or "instance-type" in key.lower()
                or "instance-family" in key.lower()
            ):
                named = [_gpu_name(str(v)) for v in vals]
                kinds = set(named) - {None}
                if None in named and vals and _names_gpu(key):
                    # the pod may land on a GPU kvcheck cannot place
                    if unknown is None:
                        odd = [str(v) for v, n in zip(vals, named, strict=True) if n is None]
                        unknown = (", ".join(odd), f"node affinity {key} in {list(vals)}")
                elif len(kinds) == 1:
                    g = kinds.pop()
                    return g, f"node affinity {key} in {list(vals)}"
    for tol in spec.get("tolerations") or []:
        if isinstance(tol, dict):
            for part in (tol.get("key"), tol.get("value")):
                if isinstance(part, str) and part not in ("nvidia.com/gpu", "amd.com/gpu"):
                    g = normalize_gpu_name(part)
                    if g and ("gpu" in str(tol.get("key", "")).lower() or g in part.lower()):
                        return g, f"toleration {tol.get('key')}={tol.get('value')}"
    return unknown if unknown is not None else (None, "")


def _gpus(container: Any) -> int | None:
    res = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(res, dict):
        return None
    for part in ("limits", "requests"):
        d = res.get(part)
        if isinstance(d, dict):
            for key in _GPU_RESOURCES:
                if key in d:
                    n = _int(d[key], -1)
                    if n >= 0:
                        return n
    return None


def _words(container: dict[str, Any], file: str, scope: Scope) -> list[Word]:
    """``command`` + ``args`` -> words with their lines, ``$(VAR)`` expanded."""
    words: list[Word] = []
    for key in ("command", "args"):
        items = container.get(key)
        key_line = container.line_of(key) if isinstance(container, LMap) else 0
        if isinstance(items, str):
            items_l = LSeq([items])
            items_l.lines = [key_line]
            items = items_l
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if item is None:
                continue
            text = str(item).lower() if isinstance(item, bool) else str(item)
            line = items.line_of(i) if isinstance(items, LSeq) else key_line
            miss: list[str] = []
            value = expand(text, scope, Location(file, line), miss, syntax="k8s")
            # ${VAR} in an exec-form manifest: a placeholder for envsubst/templating
            value = expand(value, scope, Location(file, line), miss, syntax="envsubst")
            # <NAME> docs placeholders and {{ .Values.x }} template actions: unresolved values
            miss.extend(x for x in placeholders(value) if x not in miss)
            words.append(Word(value, line, miss, True, False))
    return words


def _groups(obj: Any, file: str) -> list[Group]:
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
            out.extend(_groups(item, file))
        return out
    if kind == "Pod":
        return [Group(kind, name, spec, line=line)]
    if kind in _POD_KINDS:
        reps = _int(spec.get("parallelism" if kind == "Job" else "replicas"), 1)
        return [Group(kind, name, _pod_spec(spec.get("template")), replicas=reps, line=line)]
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        worker = _pod_spec(lwt.get("workerTemplate"))
        leader = _pod_spec(lwt.get("leaderTemplate")) or worker
        return [
            Group(
                kind,
                name,
                leader,
                worker,
                replicas=_int(spec.get("replicas"), 1),
                nodes=_int(lwt.get("size"), 1),
                line=line,
            )
        ]
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
            lwt = rspec.get("leaderWorkerTemplate") or {}
            worker = _pod_spec(lwt.get("workerTemplate"))
            leader = _pod_spec(lwt.get("leaderTemplate")) or worker
            nodes = _int(lwt.get("size"), 1)
            out.append(
                Group(
                    "LeaderWorkerSet",
                    f"{name}/{role.get('name', '?')}",
                    leader,
                    worker if nodes > 1 else None,
                    replicas=slices * _int(rspec.get("replicas"), 1),
                    nodes=nodes,
                    line=getattr(role, "line", line),
                )
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


def _check_group_caps(g: Group, file: str, so_far: int) -> None:
    """A group's replicas and nodes (LeaderWorkerSet ``size``, ``nodeCount``...) and the
    instances read so far against kvcheck's caps, before any node is expanded."""
    from kvcheck.sources.limits import check_cap

    check_cap("replicas", g.replicas, field=f"{g.name}: replicas", source=file, line=g.line or None)
    check_cap(
        "nodes", g.nodes, field=f"{g.name}: nodes (size / nodeCount / podGroupSize)", source=file, line=g.line or None
    )
    check_cap("containers", so_far + 1, field="containers launching SGLang", source=file, line=g.line or None)


def _dynamo_multinode(inst: Instance, g: Group) -> None:
    """A DGD service with ``multinode.nodeCount`` > 1 whose args name no ``--nnodes``:
    Dynamo's operator wires SGLang's multi-node flags itself (``--dist-init-addr``,
    ``--nnodes``, ``--node-rank``; Dynamo docs, "Multinode"). Added here per node, the
    leader address as a symbol, located at the service."""
    loc = Location(inst.location.file, g.line or inst.location.line)
    argvs = []
    for rank in range(g.nodes):
        argvs.append(
            list(inst.argv)
            + ["--dist-init-addr", "$(DYNAMO_LEADER_ADDRESS)", "--nnodes", str(g.nodes), "--node-rank", str(rank)]
        )
    inst.node_argvs = argvs
    inst.argv = argvs[0]
    for flag in ("--dist-init-addr", "--nnodes", "--node-rank"):
        inst.arg_locations.setdefault(flag, loc)


def read_manifest(
    path: Path, docs: list[Any], env: dict[str, str] | None, *, use_os_environ: bool = False
) -> Deployment:
    """Kubernetes documents of one file -> ``Deployment``. Raises ``InputError`` when
    no container in the file launches an SGLang server or PD router."""
    file = str(path)
    dep = Deployment(name=path.name, source=Location(file, 1))
    kinds: list[str] = []
    non_pd: list[Location] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind"):
            kinds.append(str(doc["kind"]))
        for g in _groups(doc, file):
            _read_group(g, file, env, use_os_environ, dep, non_pd)
    if (
        not dep.instances
        and not dep.routers
        and not any(p.id in ("config-not-read", "unresolved-variable", "startup-argparse") for p in dep.problems)
    ):
        found = ", ".join(sorted(set(kinds))) or "no Kubernetes objects"
        from kvcheck.sources.deployments.sourcing import NoServers

        if non_pd:
            raise NoServers(
                f"line {non_pd[0].line}: a container launches an SGLang server without --disaggregation-mode "
                "prefill|decode (it takes no part in KV "
                "transfer); kvcheck checks prefill/decode deployments and found no prefill or decode server in this "
                f"file ({found})",
                source=file,
                non_pd=non_pd,
            )
        raise NoServers(
            "no container launches an SGLang server or PD router (python -m sglang.launch_server, sglang serve, "
            f"python -m dynamo.sglang); found: {found}",
            source=file,
        )
    if dep.instances:
        dep.problems.extend(non_pd_problem(loc) for loc in non_pd)
    for r in dep.routers:
        link_router(r, dep.instances)
    for uri, where in _base_models(docs, file):
        for inst in dep.instances:
            inst.model_clues.append((uri, f"OME base model at {where}"))
    _share_ome_served_names(dep)
    if (
        len(docs) == 1
        and isinstance(docs[0], dict)
        and isinstance(docs[0].get("metadata"), dict)
        and docs[0]["metadata"].get("name")
    ):
        dep.name = str(docs[0]["metadata"]["name"])
    return dep


def _share_ome_served_names(dep: Deployment) -> None:
    """One OME runtime's components mount the same base model at ``$(MODEL_PATH)`` (the
    controller sets it from the InferenceService's one base model for the engine, decoder
    and their workers): a ``--served-model-name`` one component gives is a clue to the model
    of the runtime's other ``$(MODEL_PATH)`` components, when the runtime gives one name."""
    from kvcheck.sources.deployments.launch import option_value

    by_runtime: dict[str, list] = {}
    for inst in dep.instances:
        if inst.kind in ("ClusterServingRuntime", "ServingRuntime") and option_value(inst.argv, "model_path") == (
            "$(MODEL_PATH)"
        ):
            by_runtime.setdefault(inst.name.split("/", 1)[0], []).append(inst)
    for members in by_runtime.values():
        named = {
            (served, m.name, m.arg_locations.get("--served-model-name"))
            for m in members
            if (served := option_value(m.argv, "served_model_name"))
        }
        if len({n for n, _, _ in named}) != 1:
            continue
        served, who, loc = sorted(named, key=str)[0]
        for m in members:
            if not option_value(m.argv, "served_model_name"):
                m.model_clues.append(
                    (
                        served,
                        f"--served-model-name of {who}" + (f" at {loc}" if loc else "") + " (the same $(MODEL_PATH))",
                    )
                )


def _base_models(docs: list[Any], file: str) -> list[tuple[str, Location]]:
    """OME ``ClusterBaseModel`` / ``BaseModel`` objects of the file: the hub id of each
    ``spec.storage.storageUri: hf://ORG/NAME`` (the model the runtime mounts at
    ``$(MODEL_PATH)``), when the file holds exactly one."""
    out = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") in ("ClusterBaseModel", "BaseModel"):
            storage = (doc.get("spec") or {}).get("storage") if isinstance(doc.get("spec"), dict) else None
            uri = storage.get("storageUri") if isinstance(storage, dict) else None
            if isinstance(uri, str) and uri.startswith("hf://"):
                at = storage.line_of("storageUri") if isinstance(storage, LMap) else None
                out.append((uri[5:].split("@")[0].strip("/"), Location(file, at)))
    return out if len(out) == 1 else []


def injected(kind: str, rank: int, size: int) -> dict[str, VarDef]:
    """Variables a controller puts in each pod of a multi-node group: LeaderWorkerSet
    (``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``; also used by OME's
    leader/worker runtimes and RBG's LWS workloads) and RBG's leaderWorkerPattern
    (``RBG_LWP_LEADER_ADDRESS``, ``RBG_LWP_GROUP_SIZE``, ``RBG_LWP_WORKER_INDEX``). The
    leader address stays a symbol (the same on every node); the rank and size are known."""
    out: dict[str, VarDef] = {}
    for prefix in ("LWS", "RBG_LWP"):
        out[f"{prefix}_LEADER_ADDRESS"] = VarDef(f"$({prefix}_LEADER_ADDRESS)", None, "literal")
        out[f"{prefix}_GROUP_SIZE"] = VarDef(str(size), None, "literal")
        out[f"{prefix}_WORKER_INDEX"] = VarDef(str(rank), None, "literal")
    return out


def _ome_injected(pod: Any, nodes: int) -> dict[str, VarDef]:
    """What OME's controller puts in a runtime pod's container: ``MODEL_PATH`` (the base
    model's path in the pod, named by the file elsewhere: kept a symbol), and
    ``PARALLELISM_SIZE`` = the container's GPUs x the pods of its group (one leader or
    runner plus the worker size; ``setParallelismEnvVarForEngine`` /
    ``setParallelismEnvVarForDecoder``, sgl-project/ome
    pkg/controller/v1beta1/inferenceservice/components/{engine,decoder}.go), when the
    runtime's first container gives a GPU count."""
    out = {"MODEL_PATH": VarDef("$(MODEL_PATH)", None, "literal")}
    containers = pod.get("containers") if isinstance(pod, dict) else None
    gpus = _gpus(containers[0]) if isinstance(containers, list) and containers else None
    if gpus:
        out["PARALLELISM_SIZE"] = VarDef(str(gpus * max(1, nodes)), None, "literal")
    return out


def _launches_of(
    pod: Any,
    file: str,
    env: dict[str, str] | None,
    use_os_environ: bool,
    extra_env: Any,
    inject: dict[str, VarDef] | None = None,
):
    """For each container of a pod spec: (container, launches, env values, unknown env)."""
    if not isinstance(pod, dict):
        return []
    out = []
    from kvcheck.sources.limits import check_cap

    check_cap(
        "containers",
        len(pod.get("containers") or []) if isinstance(pod.get("containers"), list) else 0,
        field="containers of one pod",
        source=file,
    )
    for c in pod.get("containers") or []:
        if not isinstance(c, dict):
            continue
        entries = list(extra_env or []) + list(c.get("env") or []) if isinstance(extra_env, list) else c.get("env")
        lines_src = c.get("env") if isinstance(c.get("env"), LSeq) else None
        offset = len(extra_env) if isinstance(extra_env, list) else 0

        def line_of(i: int, _src=lines_src, _off=offset, _c=c) -> int:
            if i >= _off and _src is not None:
                return _src.line_of(i - _off)
            if isinstance(extra_env, LSeq) and i < _off:
                return extra_env.line_of(i)
            return getattr(_c, "line", 0)

        base = Scope.build(env=env, use_os_environ=use_os_environ)
        if inject:
            base = Scope(layers=[{}, dict(inject), *base.layers[1:]], use_os_environ=use_os_environ)
        defs, values, unknown = container_env(entries, file, line_of, base)
        layer = {**(inject or {}), **defs}
        scope = Scope.build(container=layer, env=env, use_os_environ=use_os_environ)
        words = _words(c, file, scope)
        launches = find_launches(words, file, scope)
        out.append((c, launches, values, unknown))
    return out


def _read_group(
    g: Group, file: str, env: dict[str, str] | None, use_os_environ: bool, dep: Deployment, non_pd: list[Location]
) -> None:
    _check_group_caps(g, file, len(dep.instances))
    gpu_type, gpu_source = _gpu_type(g.leader)
    host_network = bool(g.leader.get("hostNetwork")) if isinstance(g.leader, dict) else None
    multinode = g.nodes > 1 and g.kind in (
        "LeaderWorkerSet",
        "RoleBasedGroup",
        "ClusterServingRuntime",
        "ServingRuntime",
        "StormService",
    )
    worker_argvs: list[list[str]] = []
    if g.worker is not None and g.nodes > 1:
        for rank in range(1, g.nodes):
            found = None
            inject = injected(g.kind, rank, g.nodes) if multinode else None
            if g.kind in ("ClusterServingRuntime", "ServingRuntime"):
                inject = {**(inject or {}), **_ome_injected(g.worker, g.nodes)}
            for _c, launches, _v, _u in _launches_of(g.worker, file, env, use_os_environ, g.extra_env, inject):
                for ln in launches:
                    if ln.kind == "server":
                        inst, _p = instance_from_launch(ln, file=file, name=g.name, kind=g.kind)
                        if inst is not None:
                            # a rank filled in per pod (${POD_GROUP_INDEX}): this pod's
                            found = set_node_rank(inst.argv, rank) if rank_is_symbolic(inst) else inst.argv
                            break
                if found:
                    break
            if found:
                worker_argvs.append(found)
    inject0 = injected(g.kind, 0, g.nodes) if multinode else None
    if g.kind in ("ClusterServingRuntime", "ServingRuntime"):
        # OME's controller sets MODEL_PATH to the base model's storage path in the pod
        # (sgl-project/ome pkg/controller/v1beta1/inferenceservice/components/base.go,
        # constants.ModelPathEnvVarKey): a path inside the pod, named by the file elsewhere
        inject0 = {**(inject0 or {}), **_ome_injected(g.leader, g.nodes)}
    for c, launches, values, unknown in _launches_of(g.leader, file, env, use_os_environ, g.extra_env, inject0):
        for ln in launches:
            cname = str(c.get("name", "")) if isinstance(c, dict) else ""
            inst = take_launch(
                ln,
                dep,
                non_pd,
                file=file,
                router_name=g.name,
                router_image=c.get("image"),
                name=g.name if not cname or g.kind in ("DynamoGraphDeployment",) else f"{g.name}/{cname}",
                kind=g.kind,
                env=values,
                image=str(c["image"]) if c.get("image") else None,
                replicas=g.replicas,
                nodes=max(1, g.nodes),
                gpus=g.gpus if g.gpus is not None else _gpus(c),
                gpu_type=gpu_type,
                gpu_source=gpu_source,
                hosts=[],
                host_network=host_network,
            )
            if inst is None:
                continue
            # a KV-relevant variable from a Secret/ConfigMap (valueFrom): its value is unknown
            inst.unresolved += env_unresolved({n: () for n in unknown if n not in inst.env}, inst.env, inst.location)
            if g.nodes > 1:
                # the worker pods run the worker template's line (ranks 1..nodes-1)
                if len(worker_argvs) == g.nodes - 1:
                    inst.node_argvs = [inst.argv] + worker_argvs
                else:
                    inst.node_argvs = [inst.argv] + [list(inst.argv) for _ in range(g.nodes - 1)]
                if g.kind == "DynamoGraphDeployment" and option_value(inst.argv, "nnodes") is None:
                    _dynamo_multinode(inst, g)
            if g.kind == "RoleBasedGroup" and g.line and inst.location.line is not None and inst.location.line < g.line:
                # the command came from a roleTemplate shared by several roles: the
                # instance is where its own role says what it is
                own = inst.arg_locations.get("--disaggregation-mode")
                inst.location = own if own is not None and own.line and own.line >= g.line else Location(file, g.line)
            if c.get("envFrom"):
                dep.problems.append(
                    Problem(
                        "env-from",
                        f"{inst.location}: {inst.name} takes environment variables from envFrom (a ConfigMap or "
                        "Secret) that kvcheck cannot read",
                        inst.location,
                        f"pass the KV-relevant variables it sets (SGLANG_*, UCX_*, NIXL_*) with --{inst.role}-env FILE",
                    )
                )
            dep.instances.append(inst)
