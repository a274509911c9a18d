"""Shell scripts and docs blocks -> one ``Deployment``.

Reads every statement of the script (or of each fenced shell block of a Markdown
file) in order: assignments (``VAR=v``, ``export VAR=v``) feed later variable
references; each SGLang server start becomes an ``Instance`` (launch lines that are the
node ranks of one multi-node instance are merged), each PD router start a ``Router``,
linked to the instances its URLs name. Bare processes share their machine's network
(``host_network=True``) unless started by ``docker run`` without ``--network host``.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem
from kvcheck.sources.deployments.launch import (
    find_launches,
    handle_assignments,
    instance_from_launch,
    link_router,
    merge_multinode,
    option_value,
    rank_is_symbolic,
    router_from_launch,
    set_node_rank,
)
from kvcheck.sources.deployments.shell import Word, markdown_blocks, words_of
from kvcheck.sources.deployments.variables import Scope, VarDef

_SBATCH_NODES = re.compile(r"(?m)^#SBATCH\s+(?:--nodes[= ]|-N\s*)(\d+)")
_RANK_SYMBOLS = ("$SLURM_NODEID", "$SLURM_PROCID", "$OMPI_COMM_WORLD_RANK", "$PMI_RANK")


def _slurm_layer(text: str) -> dict[str, VarDef]:
    """Variables Slurm sets in every task: the node rank and node name stay symbols (one
    launch line runs on every node), the node count comes from ``#SBATCH --nodes``."""
    layer = {n: VarDef("$" + n, None, "literal") for n in ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURMD_NODENAME", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID")}
    m = _SBATCH_NODES.search(text)
    if m:
        for n in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
            layer[n] = VarDef(m.group(1), None, "literal")
    return layer


def _expand_ranks(inst: Instance) -> None:
    """One launch line run on every node (``--node-rank $SLURM_NODEID``, ``--nnodes N``)
    -> ``nodes`` = N and one argv per rank."""
    rank = option_value(inst.argv, "node_rank")
    nn = option_value(inst.argv, "nnodes")
    symbolic = rank_is_symbolic(inst)  # --node-rank <NODE_RANK> / ${RANK}: filled in per node
    if (rank not in _RANK_SYMBOLS and not symbolic) or not (nn and nn.isdigit() and int(nn) > 1):
        return
    n = int(nn)
    inst.nodes = n
    if symbolic:
        inst.node_argvs = [set_node_rank(inst.argv, r) for r in range(n)]
    else:
        inst.node_argvs = [[str(r) if t == rank else t for t in inst.argv] for r in range(n)]
    inst.argv = inst.node_argvs[0]
    inst.node_locations = [inst.location] * n


_POSITIONAL = {"$@", "$*"}


def _with_functions(statements, functions: dict[str, list[list[Word]]]):
    """Statements as the shell runs them: a function definition (``name() { ... }``,
    ``function name { ... }``) is kept, not run; a call runs its body with ``"$@"`` /
    ``$*`` replaced by the call's arguments (the wrappers people write around
    ``python -m sglang.launch_server "$@"``)."""
    pending: str | None = None
    body: list[list[Word]] | None = None
    name = ""
    depth = 0
    for words, term in statements:
        if body is not None:
            if not words and term == "{":
                depth += 1
            elif not words and term == "}":
                depth -= 1
                if depth == 0:
                    functions[name] = body
                    body = None
                    continue
            if words:
                body.append(words)
            continue
        if not words and term == "{" and pending:
            name, pending, body, depth = pending, None, [], 1
            continue
        texts = [w.text for w in words]
        if len(texts) == 1 and term == "(" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]*", texts[0]):
            pending = texts[0]
            continue
        if len(texts) == 2 and texts[0] == "function":
            pending = texts[1].rstrip("()")
            if term == "{":
                name, pending, body, depth = pending, None, [], 1
            continue
        if not words:
            continue
        pending = None
        fn = functions.get(texts[0])
        if fn is None:
            yield words
            continue
        call_args = words[1:]
        for stmt in fn:
            out: list[Word] = []
            for w in stmt:
                if w.text in _POSITIONAL and any(u in _POSITIONAL for u in w.unresolved):
                    out.extend(call_args)
                else:
                    # the body's words are located at the call: each call is its own launch
                    out.append(Word(w.text, words[0].line, list(w.unresolved), w.quoted, w.single_quoted_only, w.file))
            yield out


def read_script(path: Path, text: str, env: dict[str, str] | None, *, use_os_environ: bool = True) -> Deployment:
    """A shell script / docs block -> ``Deployment`` (instances, routers, problems)."""
    file = str(path)
    blocks = markdown_blocks(text)
    if blocks is None:
        blocks = [(1, text)]
    scope = Scope.build(env=env, use_os_environ=use_os_environ)
    scope.layers.append(_slurm_layer(text))
    dep = Deployment(name=path.name, source=Location(file, 1))
    instances: list[Instance] = []
    non_pd: list[Location] = []
    functions: dict[str, list[list[Word]]] = {}
    for first_line, block in blocks:
        for words in _with_functions(words_of(block, file, first_line, scope), functions):
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
                if inst is None:
                    if problem is None:
                        non_pd.append(Location(file, launch.line))
                else:
                    inst.name = f"{inst.role}@{path.name}:{launch.line}"
                    _expand_ranks(inst)
                    instances.append(inst)
    dep.instances = merge_multinode(instances)
    from kvcheck.sources.release_clues import attach_script_clues

    attach_script_clues(dep.instances, text, file)  # pip install sglang==X lines (issue 14)
    if dep.instances:
        for loc in non_pd:
            dep.problems.append(
                Problem("not-disaggregated", f"{loc}: an SGLang server without --disaggregation-mode prefill|decode among PD instances; it takes no part in KV transfer", loc, "add --disaggregation-mode prefill or decode if it is meant to serve PD traffic")
            )
    for r in dep.routers:
        link_router(r, dep.instances)
    return dep
