"""``--emit k8s`` / ``--emit slurm``: run the node workers on the cluster itself.

Kubernetes: one Indexed Job per instance, ``completions = parallelism = replicas x
nodes``, each pod one worker (``python3 -m kvcheck.fabric.worker``, node name from
``JOB_COMPLETION_INDEX``) with the instance's pod placement and devices taken from its
manifest: ``nodeSelector``, ``tolerations``, ``affinity``, ``hostNetwork`` (and
``dnsPolicy: ClusterFirstWithHostNet``), the SGLang container's ``resources`` (GPUs,
``rdma/*``), ``securityContext`` and ``env``; a required pod anti-affinity on
``kubernetes.io/hostname`` keeps one worker per node. With ``--start-etcd`` a small etcd
Deployment + Service (``kvcheck-fabric-etcd:2379``) is emitted too. The coordinator then
runs anywhere that reaches the etcd: ``kvcheck fabric -f DEPLOYMENT --etcd URL --run RUN``.

Slurm: one ``srun`` line per instance (``--nodes``, ``--ntasks-per-node=1``,
``--nodelist`` when the deployment names hosts), the node name from ``SLURM_NODEID``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from kvcheck.fabric.topology import fabric_env

ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"


def _pod_spec(instance) -> tuple[dict, dict]:
    """(pod spec, container) of ``instance`` from its manifest, ({}, {}) when not found."""
    import yaml

    file = instance.location.file
    base, _, cname = instance.name.partition("/")
    try:
        docs = list(yaml.safe_load_all(Path(file).read_text()))
    except Exception:
        return {}, {}

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                yield node
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    for doc in docs:
        if not isinstance(doc, dict) or (doc.get("metadata") or {}).get("name") not in (base, None):
            continue
        for spec in walk(doc):
            for c in spec["containers"]:
                if isinstance(c, dict) and (not cname or c.get("name") == cname):
                    return spec, c
    return {}, {}


def _groups(plan, instances):
    """``(group, instance, node names)`` per instance of the plan, in order."""
    by_name: dict[str, Any] = {}
    for inst in instances:
        by_name.setdefault(inst.name, inst)
    groups: dict[str, list] = {}
    for n in plan.nodes.values():
        groups.setdefault(n.group, [n.instance, []])[1].append(n.name)
    return [(g, by_name[inst], names) for g, (inst, names) in groups.items() if inst in by_name]


def _dns_name(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")


def emit_k8s(
    plan, instances, *, etcd: str | None, run: str, image: str | None, start_etcd: bool, namespace: str | None = None
) -> str:
    """The manifests (multi-document YAML)."""
    import yaml

    docs = []
    etcd_url = etcd or "http://kvcheck-fabric-etcd:2379"
    if start_etcd:
        labels = {"app": "kvcheck-fabric-etcd"}
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "kvcheck-fabric-etcd", "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {
                                    "name": "etcd",
                                    "image": ETCD_IMAGE,
                                    "command": [
                                        "etcd",
                                        "--data-dir=/tmp/etcd",
                                        "--listen-client-urls=http://0.0.0.0:2379",
                                        "--advertise-client-urls=http://kvcheck-fabric-etcd:2379",
                                    ],
                                    "ports": [{"containerPort": 2379}],
                                }
                            ]
                        },
                    },
                },
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kvcheck-fabric-etcd"},
                "spec": {"selector": labels, "ports": [{"port": 2379, "targetPort": 2379}]},
            }
        )
    for base, inst, names in _groups(plan, instances):
        count = len(names)
        spec, container = _pod_spec(inst)
        img = image or inst.image or container.get("image") or "python:3.11"
        install = "" if image else "python3 -m pip install --quiet kvcheck && "
        cmd = (
            f"set -- {' '.join(shlex.quote(n) for n in names)}; shift $JOB_COMPLETION_INDEX; {install}exec python3 "
            "-m kvcheck.fabric.worker "
            f'--etcd {shlex.quote(etcd_url)} --run {shlex.quote(run)} --node "$1" --listen-host "$POD_IP"'
        )
        env = [{"name": k, "value": v} for k, v in fabric_env(inst.env).items()]
        env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        c = {"name": "kvcheck-fabric", "image": img, "command": ["/bin/sh", "-c", cmd], "env": env}
        for key in ("resources", "securityContext", "volumeMounts"):
            if container.get(key):
                c[key] = container[key]
        labels = {"kvcheck-fabric-run": run}
        pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [c]}
        for key in (
            "nodeSelector",
            "tolerations",
            "hostNetwork",
            "volumes",
            "hostIPC",
            "priorityClassName",
            "serviceAccountName",
            "schedulerName",
        ):
            if spec.get(key) is not None:
                pod[key] = spec[key]
        if spec.get("hostNetwork"):
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        affinity = dict(spec.get("affinity") or {})
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
        pod["affinity"] = affinity
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": _dns_name(f"kvcheck-fabric-{base}"),
                "labels": labels,
                **({"namespace": namespace} if namespace else {}),
            },
            "spec": {
                "completionMode": "Indexed",
                "completions": count,
                "parallelism": count,
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": 600,
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        }
        docs.append(job)
    head = (
        f"# kvcheck fabric workers, one per node (run {run}). Apply, then run the coordinator where etcd is "
        "reachable:\n"
        f"#   kvcheck fabric -f <deployment> --etcd {etcd_url if etcd else 'http://<etcd>:2379'} --run {run}\n"
    )
    return head + yaml.safe_dump_all(docs, sort_keys=False)


def emit_slurm(plan, instances, *, etcd: str | None, run: str) -> str:
    """One srun line per instance (run in the background), then ``wait``."""
    lines = [
        f"# kvcheck fabric workers (run {run}); then: kvcheck fabric -f <deployment> --etcd "
        f"{etcd or 'http://<etcd>:2379'} --run {run}"
    ]
    for _base, inst, names in _groups(plan, instances):
        env = ",".join(["ALL"] + [f"{k}={v}" for k, v in fabric_env(inst.env).items()])
        hosts = f" --nodelist={','.join(dict.fromkeys(inst.hosts))}" if inst.hosts else ""
        worker = (
            f"set -- {' '.join(shlex.quote(n) for n in names)}; shift $SLURM_PROCID; "
            f'exec python3 -m kvcheck.fabric.worker --etcd {etcd or "http://ETCD:2379"} --run {run} --node "$1"'
        )
        lines.append(
            f"srun --nodes={len(names)} --ntasks-per-node=1{hosts} --export={shlex.quote(env)} bash -c "
            f"{shlex.quote(worker)} &"
        )
    lines.append("wait")
    return "\n".join(lines) + "\n"
