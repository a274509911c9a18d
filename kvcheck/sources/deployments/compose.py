"""Docker Compose files -> ``Deployment``: services whose command launches SGLang.

Mirrors the Compose specification (compose-spec.io): ``services.<name>`` with
``image``, ``entrypoint`` + ``command`` (a list, or a string split like a shell would,
without running one), ``environment`` (a mapping or ``KEY=VALUE`` list),
``network_mode: host``, ``deploy.replicas`` (or ``scale``) and GPUs from
``deploy.resources.reservations.devices[].count`` / ``device_ids``. ``${VAR}`` and
``${VAR:-default}`` are Compose interpolation: resolved from ``--env FILE`` and kvcheck's
environment (not from the service's own ``environment``, as Compose does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcheck.sources.deployments.instance import Deployment, Location
from kvcheck.sources.deployments.launch import find_launches, take_launch
from kvcheck.sources.deployments.router import link_router
from kvcheck.sources.deployments.shell import Word, words_of
from kvcheck.sources.deployments.sourcing import non_pd_problem
from kvcheck.sources.deployments.variables import Scope, expand
from kvcheck.sources.deployments.yamlnodes import LMap, LSeq, sub_map


def is_compose(doc: Any) -> bool:
    """A mapping with ``services`` whose entries look like Compose services."""
    services = doc.get("services") if isinstance(doc, dict) else None
    return (
        isinstance(services, dict)
        and bool(services)
        and all(isinstance(v, dict) and ("image" in v or "build" in v or "command" in v) for v in services.values())
    )


def _words(svc: LMap, file: str, scope: Scope) -> list[Word]:
    words: list[Word] = []
    for key in ("entrypoint", "command"):
        v = svc.get(key)
        if isinstance(v, str):
            for stmt, _ in words_of(v, file, svc.line_of(key), scope):
                words.extend(stmt)
        elif isinstance(v, list):
            for i, item in enumerate(v):
                line = v.line_of(i) if isinstance(v, LSeq) else svc.line_of(key)
                miss: list[str] = []
                text = expand(str(item), scope, Location(file, line), miss, syntax="envsubst")
                words.append(Word(text, line, miss, True, False))
    return words


def _gpus(svc: dict) -> int | None:
    try:
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
    except (KeyError, TypeError):
        return None
    for d in devices or []:
        if isinstance(d, dict):
            if isinstance(d.get("device_ids"), list):
                return len(d["device_ids"])
            c = d.get("count")
            if isinstance(c, int):
                return c
    return None


def read_compose(path: Path, doc: LMap, env: dict[str, str] | None, *, use_os_environ: bool = False) -> Deployment:
    """A Compose file -> ``Deployment``."""
    file = str(path)
    dep = Deployment(name=str(doc.get("name") or path.name), source=Location(file, 1))
    scope = Scope.build(env=env, use_os_environ=use_os_environ)
    non_pd: list[Location] = []
    for sname, svc in doc["services"].items():
        envd = svc.get("environment")
        values: dict[str, str] = {}
        if isinstance(envd, dict):
            values = {str(k): "" if v is None else str(v) for k, v in envd.items()}
        elif isinstance(envd, list):
            for item in envd:
                k, _, v = str(item).partition("=")
                values[k] = v
        deploy = sub_map(svc, "deploy")
        replicas = deploy.get("replicas", svc.get("scale", 1))
        replicas = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
        from kvcheck.sources.limits import check_cap

        check_cap("replicas", replicas, field=f"services.{sname}.deploy.replicas", source=file)
        for ln in find_launches(_words(svc, file, scope), file, scope):
            inst = take_launch(
                ln,
                dep,
                non_pd,
                file=file,
                router_name=str(sname),
                router_image=svc.get("image"),
                name=str(sname),
                kind="compose",
                env=values,
                image=svc.get("image"),
                replicas=replicas,
                gpus=_gpus(svc),
                host_network=svc.get("network_mode") == "host",
            )
            if inst is not None:
                dep.instances.append(inst)
    if (
        not dep.instances
        and not dep.routers
        and not any(p.id in ("config-not-read", "unresolved-variable", "startup-argparse") for p in dep.problems)
    ):
        from kvcheck.sources.deployments.sourcing import NoServers

        if non_pd:
            raise NoServers(
                f"line {non_pd[0].line}: a Compose service launches an SGLang server without --disaggregation-mode "
                "prefill|decode (it takes "
                "no part in KV transfer); kvcheck checks prefill/decode deployments and found no prefill or decode "
                "server in this file",
                source=file,
                non_pd=non_pd,
            )
        raise NoServers("no Compose service launches an SGLang server or PD router", source=file)
    dep.problems.extend(non_pd_problem(loc) for loc in non_pd)
    for r in dep.routers:
        link_router(r, dep.instances)
    return dep
