"""Shell scripts and docs blocks -> one ``Deployment``.

Reads every statement of the script (or of each fenced shell block of a Markdown
file) in order: assignments (``VAR=v``, ``export VAR=v``) feed later variable
references; each SGLang server start becomes an ``Instance`` (launch lines that are the
node ranks of one multi-node instance are merged), each PD router start a ``Router``,
linked to the instances its URLs name. Bare processes share their machine's network
(``host_network=True``) unless started by ``docker run`` without ``--network host``.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.sources.deployments.addresses import merge_multinode, rank_is_symbolic, set_node_rank
from kvcheck.sources.deployments.branches import MAX_READINGS, BranchChoice, branch_filter
from kvcheck.sources.deployments.instance import Deployment, Instance, Location, Problem
from kvcheck.sources.deployments.launch import find_launches, handle_assignments, take_launch
from kvcheck.sources.deployments.launch_options import option_value
from kvcheck.sources.deployments.router import link_router
from kvcheck.sources.deployments.shell import Word, markdown_blocks, words_of
from kvcheck.sources.deployments.sourcing import drop_reruns, follow_sources, non_pd_problem
from kvcheck.sources.deployments.variables import Scope, VarDef

_SBATCH_NODES = re.compile(r"(?m)^#SBATCH\s+(?:--nodes[= ]|-N\s*)(\d+)")
_RANK_SYMBOLS = ("$SLURM_NODEID", "$SLURM_PROCID", "$OMPI_COMM_WORLD_RANK", "$PMI_RANK")


def _slurm_layer(text: str) -> dict[str, VarDef]:
    """Variables Slurm sets in every task: the node rank, local task id, node name and job
    id are known only when the task starts (``runtime``: a reference to one is unresolved,
    never its literal text: an address or rank is info, ``--base-gpu-id $SLURM_LOCALID`` is
    unchecked; one launch line runs on every node, ``_expand_ranks``), the node count comes
    from ``#SBATCH --nodes``."""
    layer = {
        n: VarDef("$" + n, None, "runtime")
        for n in (
            "SLURM_NODEID",
            "SLURM_PROCID",
            "SLURM_LOCALID",
            "SLURMD_NODENAME",
            "SLURM_JOB_NODELIST",
            "SLURM_NODELIST",
            "SLURM_JOB_ID",
        )
    }
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
    budget = [MAX_CALL_STATEMENTS]  # shared by every call of this reading
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
        yield from _call(words, functions, [], budget)


# How deep function calls nest before kvcheck stops following them (a script's main ->
# a role function -> a launch helper is three; recursion never ends)
MAX_CALL_DEPTH = 16
# How many function-body statements one reading of a script runs, all calls together: a
# chain of 16 functions each calling the next twice is 2**16 statements, 20 calls per
# function five deep is 3.2 million (no real launch script comes near 1000)
MAX_CALL_STATEMENTS = 4096


def _call(words: list[Word], functions: dict[str, list[list[Word]]], active: list[str], budget: list[int]):
    """The statements ``words`` runs: itself when its first word names no function, else
    the function's body with ``"$@"``/``$*`` replaced by the call's arguments, each body
    statement that calls a function in turn run the same way (bash runs a function
    called from another function, or from a ``case`` arm inside one, when the outer one
    is called). Raises ``InputError`` on a call chain deeper than ``MAX_CALL_DEPTH``, a
    function that calls itself (kvcheck cannot tell where it stops), or calls that run more
    than ``MAX_CALL_STATEMENTS`` body statements in all (``budget``: the one-item count left
    to this reading, shared by the calls; the time grows with it)."""
    fn = functions.get(words[0].text) if words else None
    if fn is None:
        yield words
        return
    name = words[0].text
    if name in active or len(active) >= MAX_CALL_DEPTH:
        chain = " -> ".join([*active, name])
        raise InputError(
            f"line {words[0].line}: shell function calls nest too deep or recurse ({chain}); kvcheck cannot "
            "follow them: call the launch function directly, or pass the launch lines in a file of their own",
            source=words[0].file,
        )
    call_args = words[1:]
    budget[0] -= len(fn)
    if budget[0] < 0:
        raise InputError(
            f"line {words[0].line}: shell function calls run more than {MAX_CALL_STATEMENTS} statements in all "
            f"(last call: {' -> '.join([*active, name])}); kvcheck cannot follow them: call the launch function "
            "directly, or pass the launch lines in a file of their own",
            source=words[0].file,
        )
    for stmt in fn:
        out: list[Word] = []
        for w in stmt:
            if w.text in _POSITIONAL and any(u in _POSITIONAL for u in w.unresolved):
                out.extend(call_args)
            else:
                # the body's words are located at the call: each call is its own launch
                out.append(Word(w.text, words[0].line, list(w.unresolved), w.quoted, w.single_quoted_only, w.file))
        if out:
            yield from _call(out, functions, [*active, name], budget)


def read_script(path: Path, text: str, env: dict[str, str] | None, *, use_os_environ: bool = False) -> list[Deployment]:
    """A shell script / docs block -> its deployments: one, or one per set of ``if`` /
    ``case`` branches when the branches give alternative deployments
    (``kvcheck.sources.deployments.branches``).

    Each reading takes one branch of every construct on its path. Readings that give the
    same instances are one; readings whose instances take different roles (the script
    run once per node, the role picked by a condition) are merged into one deployment;
    readings that each hold the same roles are alternatives, one ``Deployment`` each,
    ``variant`` naming the branches."""
    blocks = markdown_blocks(text, markdown=path.suffix.lower() in (".md", ".mdx", ".markdown"))
    if blocks is not None and len(blocks) > 1:
        # a docs page with several self-contained examples (a Mooncake pair, a NIXL
        # pair...): each fenced block that launches both roles, else each section (the
        # blocks under one heading of level 1-3) that does, is its own deployment, never
        # paired with another example's servers
        heads = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(text)]
        line_of = lambda pos: text.count("\n", 0, pos) + 1  # noqa: E731
        heads = [(line_of(p), h) for p, h in heads]

        def section(first_line: int) -> tuple[int, str]:
            above = [h for h in heads if h[0] < first_line]
            return above[-1] if above else (0, "")

        by_block = [([b], f"block at line {b[0]}") for b in blocks]
        groups: dict[tuple[int, str], list] = {}
        for b in blocks:
            groups.setdefault(section(b[0]), []).append(b)
        by_section = [
            (bs, f"section '{h}' at line {ln}" if ln else "before the first heading") for (ln, h), bs in groups.items()
        ]
        for split in (by_block, by_section):
            out = _split_examples(path, text, env, use_os_environ, split)
            if out is not None:
                return out
    return _read_variants(path, text, env, use_os_environ, blocks if blocks is not None else [(1, text)])


_HEADING = re.compile(r"(?m)^#{1,3}\s+(.+)$")


def _split_examples(
    path: Path, text: str, env: dict[str, str] | None, use_os_environ: bool, split: list
) -> list[Deployment] | None:
    """One deployment per group of blocks that launches both roles, when two or more do
    (the other blocks together as one more); None when fewer than two do."""
    per = [(bs, label, _read_variants(path, text, env, use_os_environ, bs)) for bs, label in split]
    complete = [
        (bs, label, deps)
        for bs, label, deps in per
        if deps and all({i.role for i in d.instances} == {"prefill", "decode"} for d in deps)
    ]
    if len(complete) < 2:
        return None
    out: list[Deployment] = []
    used: set[Any] = set()
    for bs, label, deps in complete:
        used.update(b[0] for b in bs)
        for d in deps:
            d.variant = label + (f"; {d.variant}" if d.variant else "")
            out.append(d)
    rest = [b for bs, _, _ in per for b in bs if b[0] not in used]
    if rest:
        for d in _read_variants(path, text, env, use_os_environ, rest):
            if d.instances:
                d.variant = "the other blocks" + (f"; {d.variant}" if d.variant else "")
                out.append(d)
    return out


def _read_variants(
    path: Path, text: str, env: dict[str, str] | None, use_os_environ: bool, blocks: list[tuple[int, str]]
) -> list[Deployment]:
    """``read_script`` over ``blocks`` (the whole script, or fenced blocks of a page)."""
    readings: list[tuple[BranchChoice, Deployment]] = []
    tried: set = set()
    left: list[dict] = []

    def run(chosen: dict) -> tuple[BranchChoice, Deployment] | None:
        key = frozenset((c, k) for c, k in chosen.items() if k)
        if key in tried:
            return None
        if len(readings) >= MAX_READINGS:
            left.append(chosen)
            return None
        tried.add(key)
        choice = BranchChoice(dict(chosen))
        dep = _read_once(path, text, env, use_os_environ, choice, blocks)
        readings.append((choice, dep))
        return choice, dep

    def sig(dep: Deployment) -> frozenset:
        return frozenset(_ident(i) for i in dep.instances)

    # 1. every construct on the default path (each `then`, the first `case` pattern),
    # then each construct flipped alone: a construct that changes no instance alone
    # (a guard, a log line) is not combined further
    base_choice, base = run({})  # type: ignore[misc]
    relevant: dict[tuple, list[int]] = {}
    queue: list[tuple[Any, int, dict[Any, Any]]] = [(cid, len(labels), {}) for cid, labels in base_choice.seen.items()]
    while queue:
        cid, n, ctx = queue.pop(0)
        for k in range(1, n):
            got = run({**ctx, cid: k})
            if got is None:
                continue
            choice, dep = got
            if sig(dep) != sig(base):
                relevant.setdefault(cid, [0]).append(k)
            for c2, labels in choice.seen.items():  # constructs nested in this branch
                if c2 not in base_choice.seen and c2 not in {q[0] for q in queue} and c2 not in relevant:
                    queue.append((c2, len(labels), {**ctx, cid: k}))
    # 2. the relevant constructs combined (a role picked by one condition, a flag by another)
    if len(relevant) > 1:
        for combo in itertools.product(*relevant.values()):
            run(dict(zip(relevant, combo, strict=True)))
    return _combine(path, readings, left)


def _ident(inst: Instance) -> tuple:
    return (
        inst.role,
        inst.location.line,
        tuple(inst.argv),
        tuple(sorted(inst.env.items())),
        inst.nodes,
        tuple(sorted((u.variable, u.flag or "") for u in inst.unresolved)),
    )


def _combine(path: Path, readings: list[tuple[BranchChoice, Deployment]], left: list[dict]) -> list[Deployment]:
    """One deployment, or the alternatives (see ``read_script``)."""
    first = readings[0][1]
    if len(readings) == 1:
        return [first]
    kept = [(c, d) for c, d in readings if d.instances or d.routers]
    if not kept:
        return [first]
    distinct: list[tuple[BranchChoice, Deployment]] = []
    seen: set = set()
    for c, d in kept:
        sig = frozenset(_ident(i) for i in d.instances)
        if sig not in seen:
            seen.add(sig)
            distinct.append((c, d))
    extra = []
    if left:
        extra.append(
            Problem(
                "conditional-branches",
                f"{path.name}: its if/case branches combine in more than {MAX_READINGS} ways; kvcheck read the first "
                f"{MAX_READINGS}",
                Location(str(path), 1),
                "Split the script per role, or check the remaining branches by hand.",
            )
        )
    if len(distinct) == 1:
        dep = distinct[0][1]
        dep.problems.extend(extra)
        return [dep]
    # name a reading by the constructs whose branch differs between the readings kept
    varying = {cid for c, _ in distinct for cid in c.seen if len({x.chosen.get(cid, 0) for x, _ in distinct}) > 1}
    roles = {frozenset(i.role for i in d.instances) for _, d in distinct}
    if len(roles) > 1:
        # the role is picked by a condition: each branch is the role it launches, and
        # together they are the deployment (its instances named by their branch)
        merged = Deployment(name=first.name, source=first.source)
        names: set[str] = set()
        idents: set = set()
        problems: set = set()
        for c, d in distinct:
            for inst in d.instances:
                ident = _ident(inst)
                if ident in idents:
                    continue
                idents.add(ident)
                if inst.name in names:
                    inst.name = f"{inst.name} [{c.label(varying)}]"
                names.add(inst.name)
                merged.instances.append(inst)
            for r in d.routers:
                if (r.location, tuple(r.argv)) not in {(x.location, tuple(x.argv)) for x in merged.routers}:
                    merged.routers.append(r)
            for p in d.problems:
                if (p.id, p.message) not in problems:
                    problems.add((p.id, p.message))
                    merged.problems.append(p)
        merged.problems.extend(extra)
        for r in merged.routers:
            link_router(r, merged.instances)
        return [merged]
    out = []
    for c, d in distinct:
        d.variant = c.label(varying) or None
        d.problems.extend(extra)
        out.append(d)
    return out


def _read_once(
    path: Path,
    text: str,
    env: dict[str, str] | None,
    use_os_environ: bool,
    choice: BranchChoice,
    blocks: list[tuple[int, str]],
) -> Deployment:
    """One reading of ``blocks``: the branches ``choice`` takes."""
    file = str(path)
    scope = Scope.build(env=env, use_os_environ=use_os_environ)
    scope.layers.append(_slurm_layer(text))
    dep = Deployment(name=path.name, source=Location(file, 1))
    instances: list[Instance] = []
    non_pd: list[Location] = []
    functions: dict[str, list[list[Word]]] = {}
    for first_line, block in blocks:
        for words in _with_functions(
            follow_sources(branch_filter(words_of(block, file, first_line, scope), choice), file, scope, dep.problems),
            functions,
        ):
            if handle_assignments(words, scope, file):
                continue
            for launch in find_launches(words, file, scope):
                hn = launch.host_network if launch.host_network is not None else True
                inst = take_launch(
                    launch,
                    dep,
                    non_pd,
                    file=file,
                    router_name=f"router@{path.name}:{launch.line}",
                    name=f"{path.name}:{launch.line}",
                    kind="script",
                    host_network=hn,
                )
                if inst is not None:
                    inst.name = f"{inst.role}@{path.name}:{launch.line}"
                    _expand_ranks(inst)
                    instances.append(inst)
    dep.instances = merge_multinode(drop_reruns(instances, text))
    from kvcheck.sources.release_clues import attach_script_clues

    attach_script_clues(dep.instances, text, file)  # pip install sglang==X lines (issue 14)
    if dep.instances:
        dep.problems.extend(non_pd_problem(loc) for loc in non_pd)
    for r in dep.routers:
        link_router(r, dep.instances)
    return dep
