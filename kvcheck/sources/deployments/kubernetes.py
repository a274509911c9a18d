"""Kubernetes manifests -> ``Deployment``: every workload whose containers launch SGLang.

Objects read (single or multi-document YAML, ``kind: List`` included): the workload kinds
of ``kvcheck.sources.deployments.workloads`` (Pods, Deployments and the like,
LeaderWorkerSet, Dynamo, RBG, OME, AIBrix, DisaggregatedSet, any other CRD's pod specs),
each read into ``Group``s: a leader pod spec, an optional worker pod spec, replicas, nodes.

A container's ``command`` + ``args`` are joined; ``$(VAR)`` references are expanded from
the container's ``env`` the way the kubelet does; a ``bash -c`` / ``sh -c`` script is read
as shell. GPU kind comes from ``nodeSelector`` / node affinity / toleration labels
(``nvidia.com/gpu.product``, ``cloud.google.com/gke-accelerator``, ...), GPUs per node
from ``nvidia.com/gpu`` / ``amd.com/gpu`` / Dynamo ``gpu`` limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcheck.sglang.gpu import normalize_gpu_name
from kvcheck.sources.deployments.addresses import rank_is_symbolic, set_node_rank
from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem
from kvcheck.sources.deployments.launch import env_unresolved, find_launches, instance_from_launch, take_launch
from kvcheck.sources.deployments.launch_options import option_value
from kvcheck.sources.deployments.rbg import _int  # an integer field of a manifest, read as RBG reads it
from kvcheck.sources.deployments.router import link_router
from kvcheck.sources.deployments.shell import Word, placeholders
from kvcheck.sources.deployments.sourcing import non_pd_problem
from kvcheck.sources.deployments.variables import Scope, VarDef, container_env, expand
from kvcheck.sources.deployments.workloads import Group, groups
from kvcheck.sources.deployments.yamlnodes import LMap, LSeq

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
        for g in groups(doc):
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
    """For each container of a pod spec: (container, launches, env values, unknown env,
    where each ``valueFrom`` name of unknown value takes it)."""
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
        origins: dict[str, str] = {}
        defs, values, unknown = container_env(entries, file, line_of, base, origins)
        # the container's own entries win, except the LWS controller's: its webhook puts
        # LWS_* first and drops a container entry of the same name (kubernetes-sigs/lws
        # pkg/utils/pod/pod_utils.go ``addEnvVarsIfNotExists``)
        lws = {k: v for k, v in (inject or {}).items() if k.startswith("LWS_")}
        layer = {**(inject or {}), **defs, **lws}
        scope = Scope.build(container=layer, env=env, use_os_environ=use_os_environ)
        words = _words(c, file, scope)
        launches = find_launches(words, file, scope)
        out.append((c, launches, values, unknown, origins))
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
            for _c, launches, _v, _u, _o in _launches_of(g.worker, file, env, use_os_environ, g.extra_env, inject):
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
    # LWS injects its variables into every pod, a group of one too (size 1, index 0)
    inject0 = injected(g.kind, 0, max(1, g.nodes)) if multinode or g.kind == "LeaderWorkerSet" else None
    if g.kind in ("ClusterServingRuntime", "ServingRuntime"):
        # OME's controller sets MODEL_PATH to the base model's storage path in the pod
        # (sgl-project/ome pkg/controller/v1beta1/inferenceservice/components/base.go,
        # constants.ModelPathEnvVarKey): a path inside the pod, named by the file elsewhere
        inject0 = {**(inject0 or {}), **_ome_injected(g.leader, g.nodes)}
    for c, launches, values, unknown, origins in _launches_of(
        g.leader, file, env, use_os_environ, g.extra_env, inject0
    ):
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
            for u in inst.unresolved:
                u.origin = u.origin or origins.get(u.variable, "")
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
