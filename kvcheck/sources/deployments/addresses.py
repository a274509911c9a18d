"""Address, port and node-rank options of a launch line, and the node ranks of one multi-node instance.

Options whose value is filled in at run time (``--host ${POD_IP}``, ``--port $PORT``,
``--node-rank $SLURM_NODEID``: ``ADDRESS_DESTS``) shape no KV region and no transfer
decision: ``settle_addresses`` keeps them apart from the other unresolved values.
``merge_multinode`` joins the launch lines that are the node ranks of one instance (same
role and ``--dist-init-addr``, ``--nnodes`` > 1) into one ``Instance`` with one argv per
node, as SGLang's ``ServerArgs`` (``nnodes``, ``node_rank``, ``dist_init_addr``; 0.5.x)
runs one server over several nodes.
"""

from __future__ import annotations

from kvcheck.sources.deployments.instance import Instance, Unresolved
from kvcheck.sources.deployments.launch_options import _dest, option_value
from kvcheck.sources.deployments.shell import Word

# Options whose value is where a server listens or finds its peers, or which node it is:
# filled in at run time (a pod IP, a node rank from the scheduler), they shape no KV
# region and no transfer decision. Unresolved, they are checked for consistency across
# an instance's nodes (the same symbol on every node) and reported as info, not unchecked.
ADDRESS_DESTS = frozenset(
    {
        "host",
        "port",
        "dist_init_addr",
        "node_rank",
        "nccl_port",
        "disaggregation_bootstrap_port",
        "grpc_port",
        "engine_info_bootstrap_port",
        "encoder_bootstrap_port",
        "gated_launch_port",
        "smg_http_sidecar_port",
    }
)
# of these, the ones SGLang reads as integers: an unresolved one cannot be parsed as written
_INT_ADDRESS_DESTS = ADDRESS_DESTS - {"host", "dist_init_addr"}


def settle_addresses(
    args: list[Word], argv: list[str], unresolved: list[Unresolved]
) -> tuple[list[str], list[Unresolved], list[Unresolved]]:
    """Split the unresolved values of address, port and rank options (``ADDRESS_DESTS``)
    from the rest -> (argv, unresolved, symbolic). A textual one (``--host ${POD_IP}``,
    ``--dist-init-addr <ADDR>:5000``) stays as written: the same symbol on every node is
    consistent; an integer one is taken out of ``argv`` (``--port $PORT``: unknown), except
    ``--node-rank``, which becomes 0 (``argv`` is node rank 0's; the readers give the other
    nodes their ranks)."""
    if not unresolved:
        return argv, unresolved, []
    symbolic = [u for u in unresolved if u.flag and _dest(u.flag) in ADDRESS_DESTS]
    if not symbolic:
        return argv, unresolved, []
    rest = [u for u in unresolved if u not in symbolic]
    drop = {u.flag for u in symbolic if _dest(u.flag or "") in _INT_ADDRESS_DESTS}
    out: list[str] = []
    k = 0
    while k < len(argv):
        tok = argv[k]
        name = tok.split("=", 1)[0]
        if name in drop and tok.startswith("--"):
            has_eq = "=" in tok
            value_word = args[k] if has_eq else (args[k + 1] if k + 1 < len(args) else None)
            if value_word is not None and value_word.unresolved:
                if _dest(name) == "node_rank":
                    out += [f"{name}=0"] if has_eq else [name, "0"]
                k += 1 if has_eq else 2
                continue
        out.append(tok)
        k += 1
    return out, rest, symbolic


def set_node_rank(argv: list[str], rank: int) -> list[str]:
    """``argv`` with its ``--node-rank`` value set to ``rank`` (added when absent)."""
    out = list(argv)
    for k, tok in enumerate(out):
        if tok.startswith("--") and _dest(tok.split("=", 1)[0]) == "node_rank":
            if "=" in tok:
                out[k] = tok.split("=", 1)[0] + f"={rank}"
            elif k + 1 < len(out):
                out[k + 1] = str(rank)
            return out
    return out + ["--node-rank", str(rank)]


def rank_is_symbolic(inst: Instance) -> bool:
    return any(u.flag and _dest(u.flag) == "node_rank" for u in inst.symbolic)


def merge_multinode(instances: list[Instance]) -> list[Instance]:
    """Launch lines that are the node ranks of one multi-node instance (same role,
    ``--dist-init-addr`` and ``--nnodes`` > 1, different ``--node-rank``) -> one
    ``Instance`` with ``nodes`` = ``--nnodes`` and one argv per node, rank order."""
    groups: dict[tuple, list[tuple[int, Instance]]] = {}
    out: list[Instance] = []
    # the rendezvous addresses some line of several nodes names: a line with the same
    # --dist-init-addr but another --nnodes (1, or none) is a node of that instance whose
    # flags disagree (the multinode-args check names it), never an instance of its own
    multi = {
        (i.role, option_value(i.argv, "dist_init_addr"), i.launcher)
        for i in instances
        if (option_value(i.argv, "nnodes") or "").isdigit() and int(option_value(i.argv, "nnodes") or 0) > 1
    }
    for inst in instances:
        if inst.nodes > 1 and len(inst.node_argvs) == inst.nodes:
            out.append(inst)  # already one argv per node (a line run on every node)
            continue
        addr = option_value(inst.argv, "dist_init_addr")
        rank = option_value(inst.argv, "node_rank")
        key = (inst.role, addr, inst.launcher)
        if addr and key in multi:
            groups.setdefault(key, []).append((int(rank) if rank and rank.isdigit() else 0, inst))
            if len(groups[key]) == 1:
                out.append(inst)
            continue
        out.append(inst)
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        head = members[0][1]
        counts = [int(n) for n in (option_value(m[1].argv, "nnodes") or "1" for m in members) if n.isdigit()]
        head.nodes = max(counts or [1])
        head.argv = members[0][1].argv
        head.node_argvs = [m[1].argv for m in members]
        head.node_locations = [m[1].location for m in members]
        for _, m in members[1:]:
            for k, v in m.arg_locations.items():
                head.arg_locations.setdefault(k, v)
            head.unresolved.extend(u for u in m.unresolved if u not in head.unresolved)
            for h in m.hosts:
                if h not in head.hosts:
                    head.hosts.append(h)
    return out
