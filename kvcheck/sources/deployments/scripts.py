"""Shell scripts and docs blocks -> one ``Deployment``.

Reads every statement of the script (or of each fenced shell block of a Markdown
file) in order: assignments (``VAR=v``, ``export VAR=v``) feed later variable
references; each SGLang server start becomes an ``Instance`` (launch lines that are the
node ranks of one multi-node instance are merged), each PD router start a ``Router``,
linked to the instances its URLs name. Bare processes share their machine's network
(``host_network=True``) unless started by ``docker run`` without ``--network host``.
"""

from __future__ import annotations

from pathlib import Path

from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem
from kvcheck.sources.deployments.launch import find_launches, handle_assignments, instance_from_launch, link_router, merge_multinode, router_from_launch
from kvcheck.sources.deployments.shell import markdown_blocks, words_of
from kvcheck.sources.deployments.variables import Scope


def read_script(path: Path, text: str, env: dict[str, str] | None, *, use_os_environ: bool = True) -> Deployment:
    """A shell script / docs block -> ``Deployment`` (instances, routers, problems)."""
    file = str(path)
    blocks = markdown_blocks(text)
    if blocks is None:
        blocks = [(1, text)]
    scope = Scope.build(env=env, use_os_environ=use_os_environ)
    dep = Deployment(name=path.name, source=Location(file, 1))
    instances: list[Instance] = []
    non_pd: list[Location] = []
    for first_line, block in blocks:
        for words, _term in words_of(block, file, first_line, scope):
            if handle_assignments(words, scope, file):
                continue
            for launch in find_launches(words, file, scope):
                if launch.kind == "router":
                    r = router_from_launch(launch, file=file, name=f"router@{path.name}:{launch.line}")
                    if r is not None:
                        dep.routers.append(r)
                    continue
                hn = launch.host_network if launch.host_network is not None else True
                inst, problem = instance_from_launch(
                    launch, file=file, name=f"{path.name}:{launch.line}", kind="script", host_network=hn
                )
                if problem:
                    dep.problems.append(problem)
                elif inst is None:
                    non_pd.append(Location(file, launch.line))
                else:
                    inst.name = f"{inst.role}@{path.name}:{launch.line}"
                    instances.append(inst)
    dep.instances = merge_multinode(instances)
    if dep.instances:
        for loc in non_pd:
            dep.problems.append(
                Problem("not-disaggregated", f"{loc}: an SGLang server without --disaggregation-mode prefill|decode among PD instances; it takes no part in KV transfer", loc, "add --disaggregation-mode prefill or decode if it is meant to serve PD traffic")
            )
    for r in dep.routers:
        link_router(r, dep.instances)
    return dep
