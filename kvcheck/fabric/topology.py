"""From a deployment to the fabric to probe: nodes, the pairs that move KV, one probe job
per prefill class x decode class, and the rounds.

Instances come from ``kvcheck.sources.deployments``, classes and each class pair's
transfer plan from ``kvcheck.cluster`` (the same decision ``kvcheck preflight -f``
takes), the pairs from SGLang's rank mapping (``kvcheck.fabric.mapping``), the rounds
from ``kvcheck.fabric.rounds``. Node names: the instance's hosts when the deployment
lists one per node (``HOST:<workload>-<replica>`` when several instances share a host,
whose probes then never overlap: ``rounds.schedule_hosts``), else
``<workload>-<replica>`` (``-n<rank>`` for multi-node instances).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcheck.errors import InputError
from kvcheck.fabric.mapping import Parallel, node_pairs, parallel_of

PROBED_PATHS = ("equal_tp", "direct_to_host", "mixed_segments")


@dataclass
class Node:
    """One node of the deployment, standing for one node of one instance replica."""

    name: str
    role: str
    instance: str
    host: str
    replica: int
    node_rank: int
    class_id: str | None
    location: str
    env: dict = field(default_factory=dict)
    layout: dict | None = None
    parallel: Parallel | None = None
    asked_devices: list[str] = field(default_factory=list)
    asked_source: str = ""
    group: str = ""


@dataclass
class FabricPlan:
    """``nodes`` (name -> Node), ``pairs`` ((prefill node, decode node), in order), the
    probe ``jobs`` per (prefill class, decode class) (None with a reason in ``skipped``
    when the static plan is not one kvcheck probes), ``rounds``, and static ``notes``."""

    deployment: str
    nodes: dict[str, Node]
    pairs: list[tuple[str, str]]
    jobs: dict[tuple[str, str], dict | None]
    skipped: dict[tuple[str, str], str]
    rounds: list[list[tuple[str, str]]]
    notes: list[str] = field(default_factory=list)

    @property
    def prefill_nodes(self) -> list[str]:
        return [n for n, x in self.nodes.items() if x.role == "prefill"]

    @property
    def decode_nodes(self) -> list[str]:
        return [n for n, x in self.nodes.items() if x.role == "decode"]

    def job_for(self, pair: tuple[str, str]) -> dict | None:
        p, d = self.nodes[pair[0]], self.nodes[pair[1]]
        if p.class_id is None or d.class_id is None:
            return None
        return self.jobs.get((p.class_id, d.class_id))

    def contract(self) -> dict:
        return {
            "deployment": self.deployment,
            "nodes": [
                {
                    "name": n.name,
                    "host": n.host,
                    "role": n.role,
                    "instance": n.instance,
                    "replica": n.replica,
                    "node_rank": n.node_rank,
                    "class": n.class_id,
                    "asked_devices": n.asked_devices,
                    "asked_source": n.asked_source,
                }
                for n in self.nodes.values()
            ],
            "pairs": [list(p) for p in self.pairs],
            "rounds": [[list(p) for p in r] for r in self.rounds],
            "skipped": [{"prefill_class": k[0], "decode_class": k[1], "why": v} for k, v in self.skipped.items()],
            "notes": self.notes,
        }


FABRIC_ENV_PREFIXES = ("UCX_", "NIXL_", "SGLANG_DISAGGREGATION_", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def fabric_env(env: dict) -> dict:
    """The part of an instance's environment a node's agent needs (UCX, NIXL, SGLang's
    disaggregation variables, the visible GPUs): nothing else (tokens, keys) is written
    to etcd or into emitted manifests."""
    return {k: str(v) for k, v in env.items() if k.startswith(FABRIC_ENV_PREFIXES)}


def _asked_devices(env: dict, args: dict) -> tuple[list[str], str]:
    """The devices the deployment asks UCX for: ``UCX_NET_DEVICES`` (which wins in SGLang
    0.5.23's ``NixlKVManager.__init__``), else ``--disaggregation-ib-device``."""
    if env.get("UCX_NET_DEVICES"):
        return [d.strip() for d in env["UCX_NET_DEVICES"].split(",") if d.strip()], "UCX_NET_DEVICES"
    ib = args.get("disaggregation_ib_device")
    if ib:
        return [str(ib)], "--disaggregation-ib-device"
    return [], ""


def build_plan(deployments, *, pages: int, timeout: float, options=None, deployment_index: int = 0) -> FabricPlan:
    """The fabric of one deployment (``deployment_index`` of those read). ``InputError``
    when it has no prefill or no decode instance."""
    from kvcheck.cluster import ClusterOptions, check_deployments
    from kvcheck.nixl.agent import Layout
    from kvcheck.nixl.probe import build_job
    from kvcheck.sglang.geometry import derive_geometry

    report = check_deployments(deployments, options or ClusterOptions())
    if not 0 <= deployment_index < len(report.deployments):
        raise InputError(
            f"--variant {deployment_index}: the files give {len(report.deployments)} deployment(s)", field="--variant"
        )
    dep = report.deployments[deployment_index]
    notes = []
    if len(report.deployments) > 1:
        notes.append(
            f"{len(report.deployments)} deployments read; probing #{deployment_index} "
            f"({dep.deployment.variant or dep.deployment.name})"
        )
    classes = {c.id: c for c in dep.classes}
    geometry = {}
    for c in dep.classes:
        if c.side is not None and c.side.model.attention != "not_modeled":
            try:
                geometry[c.id] = derive_geometry(c.side)
            except InputError as exc:
                notes.append(f"class {c.id}: no geometry ({exc})")
    nodes: dict[str, Node] = {}
    per_instance: dict[int, list[list[str]]] = {}
    host_count: dict[str, int] = {}
    for ir in dep.instances:
        inst = ir.instance
        if len(inst.hosts) == inst.replicas * max(inst.nodes, 1):
            for h in inst.hosts:
                host_count[h] = host_count.get(h, 0) + 1
    bases: dict[str, int] = {}
    for ir in dep.instances:
        b = ir.instance.name.split("/")[0]
        bases[b] = bases.get(b, 0) + 1
    seen_base: dict[str, int] = {}
    for ir in dep.instances:
        inst = ir.instance
        cls = classes.get(ir.class_id) if ir.class_id else None
        mla = bool(cls and cls.side is not None and cls.side.model.attention == "MLA")
        par = parallel_of(ir.args or {}, inst.nodes, mla)
        base = inst.name.split("/")[0]
        if bases[base] > 1:  # several instances under one workload name: tell them apart
            seen_base[base] = seen_base.get(base, -1) + 1
            base = f"{base}-{inst.role}{seen_base[base]}"
        hosts = list(inst.hosts) if len(inst.hosts) == inst.replicas * max(inst.nodes, 1) else []
        asked, src = _asked_devices(inst.env, ir.args or {})
        replicas = []
        for r in range(max(inst.replicas, 1)):
            names = []
            for k in range(max(par.nnodes, 1)):
                own = f"{base}-{r}" if par.nnodes == 1 else f"{base}-{r}-n{k}"
                host = hosts[r * par.nnodes + k] if hosts and r * par.nnodes + k < len(hosts) else None
                # A host named once is the node's name; a host several instances share
                # (several servers on one machine) qualifies each of them.
                name = host if host and host_count.get(host) == 1 else (f"{host}:{own}" if host else own)
                while name in nodes:
                    name += "'"
                geom = geometry.get(ir.class_id) if ir.class_id is not None else None
                nodes[name] = Node(
                    name=name,
                    role=inst.role,
                    instance=inst.name,
                    host=host or name,
                    group=base,
                    replica=r,
                    node_rank=k,
                    class_id=ir.class_id,
                    location=str(inst.location),
                    env=fabric_env(inst.env),
                    layout=Layout.from_geometry(geom, pages).as_dict() if geom is not None else None,
                    parallel=par,
                    asked_devices=asked,
                    asked_source=src,
                )
                names.append(name)
            replicas.append(names)
        per_instance[id(ir)] = replicas
    pairs: list[tuple[str, str]] = []
    for pi in dep.instances:
        if pi.instance.role != "prefill":
            continue
        for di in dep.instances:
            if di.instance.role != "decode":
                continue
            pp, dd = nodes[per_instance[id(pi)][0][0]].parallel, nodes[per_instance[id(di)][0][0]].parallel
            assert pp is not None and dd is not None  # every node above is built with its instance's parallel
            mapped = sorted(node_pairs(pp, dd))
            for preps in per_instance[id(pi)]:
                for dreps in per_instance[id(di)]:
                    pairs.extend((preps[a], dreps[b]) for a, b in mapped)
    pairs = list(dict.fromkeys(pairs))
    jobs: dict[tuple[str, str], dict | None] = {}
    skipped: dict[tuple[str, str], str] = {}
    for pr in dep.pairs:
        key = (pr.prefill.id, pr.decode.id)
        plan = pr.report.plan if pr.report is not None else None
        pg, dg = geometry.get(pr.prefill.id), geometry.get(pr.decode.id)
        if plan is None or pg is None or dg is None:
            ids = sorted(
                {x.finding.id for c in (pr.prefill, pr.decode) for x in c.findings}
                | {x.finding.id for x in pr.findings if x.finding.severity.value in ("error", "unchecked")}
            )
            skipped[key] = (
                "kvcheck cannot derive this pair's plan or geometry"
                + (f" ({', '.join(ids)})" if ids else "")
                + "; see kvcheck preflight -f"
            )
        elif plan.error is not None:
            skipped[key] = (
                f"the runtime would not transfer with this pair's plan: {plan.error.type}: {plan.error.message}"
            )
        elif plan.path not in PROBED_PATHS:
            skipped[key] = (
                f"transfer path {plan.path!r} is not probed (the probe follows equal-TP, direct-to-host and "
                "segmented plans)"
            )
        else:
            backend = (pr.prefill.first.instance.env or {}).get(
                "SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX"
            )  # the runtime's default: UCX
            jobs[key] = build_job(plan, pg, dg, "", pages=pages, timeout=timeout, backend=backend)
            continue
        jobs[key] = None
    from kvcheck.fabric.rounds import schedule, schedule_hosts

    if any(n.parallel and n.parallel.pp > 1 for n in nodes.values()):
        notes.append(
            "pipeline-parallel instances: every node registers PP stage 0's regions (the links, not each stage's "
            "layout, are probed)"
        )
    return FabricPlan(
        deployment=dep.deployment.variant or dep.deployment.name,
        nodes=nodes,
        pairs=pairs,
        jobs=jobs,
        skipped=skipped,
        rounds=schedule(pairs)
        if len({n.host for n in nodes.values()}) == len(nodes)
        else schedule_hosts(pairs, lambda n: nodes[n].host),
        notes=notes,
    )
