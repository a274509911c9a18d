"""Cluster-wide checks a single prefill/decode pair cannot see.

Each check is a function ``(deployment, instances) -> list[Located]`` registered in
``CLUSTER_CHECKS`` with its id, severity, what it catches and the fix (``kvcheck checks``
style). ``instances`` are the pipeline's ``InstanceResult`` objects (parsed args in
``.args``; None when the args could not be read because a variable is unresolved).
Every rule says which SGLang 0.5.23 code it re-states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kvcheck.checks.base import Severity
from kvcheck.cluster.model import InstanceResult, Located, finding
from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Deployment, Location

DEFAULT_BOOTSTRAP_PORT = 8998  # ServerArgs.disaggregation_bootstrap_port (0.5.23)
DEFAULT_HTTP_PORT = 30000  # ServerArgs.port (0.5.23)


@dataclass(frozen=True)
class ClusterCheck:
    """A named cluster-wide check: ``id``, ``severity``, ``what`` it catches, ``fix``,
    ``why`` the runtime breaks (the check function's docstring) and a ``title``."""

    id: str
    severity: Severity
    what: str
    fix: str
    run: Callable[[Deployment, list[InstanceResult]], list[Located]]
    why: str = ""

    @property
    def title(self) -> str:
        return self.what.split(". ")[0].rstrip(".")


CLUSTER_CHECKS: dict[str, ClusterCheck] = {}


def cluster_check(id: str, severity: Severity, *, what: str, fix: str):
    """Register ``fn(deployment, instances) -> list[Located]`` under ``id``."""

    def wrap(fn):
        why = " ".join((fn.__doc__ or "").split())
        CLUSTER_CHECKS[id] = ClusterCheck(id, severity, what, fix, fn, why)
        return fn

    return wrap


def run_cluster_checks(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """Every registered cluster check over ``dep``, in registration order."""
    out: list[Located] = []
    for chk in CLUSTER_CHECKS.values():
        out += chk.run(dep, instances)
    return out


def _arg(ir: InstanceResult, dest: str, default: Any = None) -> Any:
    return (ir.args or {}).get(dest, default)


def _known(ir: InstanceResult, *dests: str) -> bool:
    """Whether every one of ``dests`` is known for ``ir``: its args were read and each is
    given on its line or, when all its args are known, SGLang's default. An instance
    whose ``--config`` file kvcheck could not take (``args_partial``) lacking one is left
    out of the check that reads it: its value may be in that file, and a check never
    decides on a default it guessed (its ``config-not-read`` finding is unchecked)."""
    return all(ir.known_arg(d)[0] for d in dests)


# Reader problems behind which a server's role may be: a --config file not read, a role
# behind an unset variable (``Problem.hides_role``), an unreadable sourced file that may
# start servers, script branches not read.
ROLE_HIDING = ("servers-not-read", "conditional-branches")


def _loc(ir: InstanceResult, *flags: str) -> Location:
    for f in flags:
        if f in ir.instance.arg_locations:
            return ir.instance.arg_locations[f]
    return ir.instance.location


def _node_args(argv: list[str], source: str) -> dict[str, Any] | None:
    from kvcheck.sglang.flags import FlagTable

    try:
        return FlagTable.load().parse_argv(list(argv), source)
    except InputError:
        return None


@cluster_check(
    "missing-role",
    Severity.ERROR,
    what="A deployment with prefill servers but no decode server, or decode servers but no prefill.",
    fix="Add the missing role (a server with --disaggregation-mode decode or prefill), or read the files that hold "
    "it together (-f FILE -f FILE).",
)
def missing_role(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """A PD request needs both roles: the router sends it to a prefill and a decode, and
    the decode waits for the prefill's KV (``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``); with
    one role missing no request completes."""
    roles = {ir.instance.role for ir in instances}
    chk = CLUSTER_CHECKS["missing-role"]
    for have, lack in (("prefill", "decode"), ("decode", "prefill")):
        if have in roles and lack not in roles:
            n = sum(1 for ir in instances if ir.instance.role == have)
            hidden = [p for p in dep.problems if p.hides_role or p.id == "unresolved-variable" or p.id in ROLE_HIDING]
            if hidden:
                # A server whose --disaggregation-mode is behind an unset variable, in a
                # --config file kvcheck could not take, or in what was not read may be the
                # missing role: kvcheck cannot tell, so the deployment is unchecked, not failed.
                what = (
                    "behind an unresolved variable"
                    if hidden[0].id == "unresolved-variable"
                    else f"in what kvcheck could not read ({hidden[0].id})"
                )
                return [
                    finding(
                        chk.id,
                        Severity.UNCHECKED,
                        f"{dep.name}: {n} {have} instance(s) and no {lack} found, but a server's role may be {what} "
                        f"({hidden[0].message})",
                        "Pass --env FILE with the variable's value so every server's --disaggregation-mode is known."
                        if hidden[0].id == "unresolved-variable"
                        else (hidden[0].fix or "Give kvcheck what it could not read."),
                        hidden[0].location,
                    )
                ]
            return [
                finding(
                    chk.id,
                    chk.severity,
                    f"{dep.name}: {n} {have} instance(s) and no {lack}: requests never complete (a {have} waits for "
                    f"its {lack} peer forever)",
                    chk.fix,
                    dep.source,
                )
            ]
    return []


def _bootstrap_host(ir: InstanceResult) -> str | None:
    """The host a prefill's bootstrap server binds on: node rank 0's host when the input
    names hosts (``Instance.hosts``) and the server shares that host's network namespace
    (``Instance.host_network`` True, or unknown); None otherwise (a pod or container with
    its own network namespace cannot clash with another on a port)."""
    if getattr(ir.instance, "host_network", None) is False:
        return None
    return ir.instance.hosts[0] if ir.instance.hosts else None


@cluster_check(
    "bootstrap-port-clash",
    Severity.ERROR,
    what="Two servers on one host where one's bootstrap server port is another's bootstrap or HTTP port.",
    fix="Give each prefill on a host its own --disaggregation-bootstrap-port (and keep it apart from every --port "
    "there).",
)
def bootstrap_port_clash(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """Re-states ``start_disagg_service`` (sglang/srt/managers/disagg_service.py, 0.5.23):
    a prefill (or any PD server with ``--enable-pd-role-switch``) starts the transfer
    backend's bootstrap server on ``--host``:``--disaggregation-bootstrap-port`` (default
    8998) from its tokenizer manager, on node rank 0. A second bind of the same port on
    that host fails at start-up. Only instances with known hosts are compared: Kubernetes
    replicas without ``hostNetwork`` each have their own network namespace."""
    chk = CLUSTER_CHECKS["bootstrap-port-clash"]
    used: dict[tuple[str, int], tuple[InstanceResult, str]] = {}
    out: list[Located] = []
    ordered = sorted(instances, key=lambda ir: ir.instance.role != "prefill")
    for ir in ordered:
        host = _bootstrap_host(ir)
        if host is None or ir.args is None:
            continue
        if not _known(ir, "disaggregation_bootstrap_port", "enable_pd_role_switch") or (
            getattr(ir.instance, "port", None) is None and not _known(ir, "port")
        ):
            continue  # a port in a --config file kvcheck could not read
        ports = [(int(getattr(ir.instance, "port", None) or _arg(ir, "port", DEFAULT_HTTP_PORT)), "--port")]
        if ir.instance.role == "prefill" or _arg(ir, "enable_pd_role_switch"):
            ports.insert(
                0,
                (
                    int(_arg(ir, "disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)),
                    "--disaggregation-bootstrap-port",
                ),
            )
        for port, flag in ports:
            other = used.get((host, port))
            if other is not None and other[0] is not ir and "--disaggregation-bootstrap-port" in (flag, other[1]):
                o, oflag = other
                out.append(
                    finding(
                        chk.id,
                        chk.severity,
                        f"{ir.instance.name} ({flag} {port}) and {o.instance.name} ({oflag} {port}) share host "
                        f"{host}: the second bind of port {port} fails at start-up",
                        chk.fix,
                        _loc(ir, flag),
                    )
                )
            else:
                used.setdefault((host, port), (ir, flag))
    return out


def _match_prefills(url: str, prefills: list[InstanceResult]) -> list[InstanceResult]:
    """Prefill instances a router ``--prefill URL`` may point at: by host name (instance
    name, host, ``--host``) and HTTP port when they say, else by port alone."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host, port = (parts.hostname or ""), parts.port
    except ValueError:
        return []
    by_port = [ir for ir in prefills if port is None or int(_arg(ir, "port", DEFAULT_HTTP_PORT)) == port]
    named = [
        ir
        for ir in by_port
        if host
        and (
            host in ir.instance.hosts
            or host == _arg(ir, "host")
            or host.split(".")[0] == ir.instance.name
            or ir.instance.name.startswith(host.split(".")[0])
        )
    ]
    return named or (
        by_port
        if len({int(_arg(i, "disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)) for i in by_port}) == 1
        else []
    )


@cluster_check(
    "router-bootstrap-port",
    Severity.ERROR,
    what="The router's bootstrap port for a prefill (--prefill URL PORT) is not that prefill's "
    "--disaggregation-bootstrap-port.",
    fix="Give the router the prefill's --disaggregation-bootstrap-port (default 8998) after its URL, or change the "
    "prefill's.",
)
def router_bootstrap_port(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """The PD router sends each request's ``bootstrap_host``/``bootstrap_port`` to the
    decode, which asks that address for the prefill's parallel info (``/route``,
    ``CommonKVReceiver`` in sglang/srt/disaggregation/common/conn.py, 0.5.23). A port the
    prefill does not serve leaves the decode without a peer: requests time out."""
    chk = CLUSTER_CHECKS["router-bootstrap-port"]
    if any(ir.args is not None and not _known(ir, "port", "disaggregation_bootstrap_port") for ir in instances):
        return []  # a server's ports are in a --config file kvcheck could not read
    prefills = [ir for ir in instances if ir.instance.role == "prefill" and ir.args is not None]
    out: list[Located] = []
    decodes = [ir for ir in instances if ir.instance.role == "decode" and ir.args is not None]
    for router in dep.routers:
        for rp in router.prefills:
            if not prefills:
                continue
            named = getattr(rp, "instance", None)  # the reader's own match, when it made one
            cands = [ir for ir in prefills if ir.instance.name == named] if named else _match_prefills(rp.url, prefills)
            if rp.bootstrap_port is None:
                # No port after the URL: the request carries none, and each server fills in
                # its own --disaggregation-bootstrap-port (Scheduler.handle_generate_request,
                # 0.5.23), so the decode asks the prefill's host on the DECODE's port.
                p_ports = {
                    int(_arg(ir, "disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)) for ir in (cands or prefills)
                }
                for d in decodes:
                    d_port = int(_arg(d, "disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT))
                    if d_port not in p_ports:
                        out.append(
                            finding(
                                chk.id,
                                chk.severity,
                                f"router --prefill {rp.url} gives no bootstrap port, so the decode {d.instance.name} "
                                f"falls back to its own --disaggregation-bootstrap-port {d_port}, "
                                f"but the prefill serves its bootstrap on {', '.join(map(str, sorted(p_ports)))}: "
                                "the decode asks the wrong port and requests time out",
                                "Give the router the prefill's bootstrap port after its URL (--prefill URL PORT), or "
                                "use the same --disaggregation-bootstrap-port on prefill and decode.",
                                router.location,
                            )
                        )
                        break
                continue
            if not cands:
                served = sorted(
                    {int(_arg(ir, "disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)) for ir in prefills}
                )
                if rp.bootstrap_port not in served:
                    out.append(
                        finding(
                            chk.id,
                            chk.severity,
                            f"router --prefill {rp.url} {rp.bootstrap_port}: no prefill serves bootstrap port "
                            f"{rp.bootstrap_port} (prefills use {', '.join(map(str, served))})",
                            chk.fix,
                            router.location,
                        )
                    )
                continue
            ports = {int(_arg(ir, "disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)) for ir in cands}
            if rp.bootstrap_port not in ports:
                ir = cands[0]
                out.append(
                    finding(
                        chk.id,
                        chk.severity,
                        f"router --prefill {rp.url} {rp.bootstrap_port}, but {ir.instance.name} serves its bootstrap "
                        f"on --disaggregation-bootstrap-port {sorted(ports)[0]}: the decode asks the wrong "
                        "port and requests time out",
                        chk.fix,
                        router.location,
                    )
                )
    return out


@cluster_check(
    "dp-rank-mapping",
    Severity.ERROR,
    what="A decode that must ask the prefill's bootstrap server for each request's prefill DP rank, when that "
    "prefill never registers it.",
    fix="Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK the same on prefill and decode, or run the prefill "
    "with --load-balance-method round_robin (it then registers every request's DP rank).",
)
def dp_rank_mapping(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """Which prefill attention-DP rank a decode pulls a request's KV from (0.5.23,
    ``DecodePreallocQueue._resolve_prefill_dp_rank`` in disaggregation/decode.py and
    ``CommonKVSender.__init__`` in disaggregation/common/conn.py):

    1. the request's own ``disagg_prefill_dp_rank`` when the router set one;
    2. rank 0 when the prefill reports ``dp_size`` 1;
    3. ``bootstrap_room % prefill dp_size`` when the prefill's load balancer is
       ``follow_bootstrap_room`` (the default of a PD prefill, ``--load-balance-method
       auto``) and the decode does not set ``SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK``;
    4. otherwise the decode queries the prefill's bootstrap server for the room's rank,
       which the prefill registered (``/register_dp_rank``) only when its own balancer is
       not ``follow_bootstrap_room`` or it sets that variable too.

    So every decode DP rank reaches a prefill rank in ``[0, prefill dp_size)`` whatever the
    two DP sizes are (attention DP spread over nodes included); the mapping breaks only in
    case 4 when the prefill never registers: the decode's query finds nothing and the
    request waits until its bootstrap timeout."""
    chk = CLUSTER_CHECKS["dp-rank-mapping"]
    var = "SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK"

    def force(ir: InstanceResult) -> bool:
        return str(ir.instance.env.get(var, "")).strip().lower() in ("1", "true", "yes", "on")

    decodes = [ir for ir in instances if ir.instance.role == "decode" and ir.args is not None and force(ir)]
    if not decodes:
        return []
    out = []
    for ir in instances:
        if ir.instance.role != "prefill" or not _known(ir, "dp_size", "load_balance_method"):
            continue
        if int(_arg(ir, "dp_size", 1)) <= 1:
            continue
        lbm = _arg(ir, "load_balance_method", "auto")
        if lbm in ("auto", "follow_bootstrap_room") and not force(ir):
            out.append(
                finding(
                    chk.id,
                    chk.severity,
                    f"{decodes[0].instance.name} sets {var}=1, so it asks the bootstrap server for each request's "
                    f"prefill DP rank; {ir.instance.name} (--dp-size {_arg(ir, 'dp_size')}, load balancer "
                    "follow_bootstrap_room) never registers it: requests wait until the bootstrap timeout",
                    chk.fix,
                    _loc(ir, "--load-balance-method", "--dp-size", "--dp"),
                )
            )
    return out


@cluster_check(
    "one-release",
    Severity.WARNING,
    what="Servers of one deployment run different SGLang releases (by image tag or --sglang-version).",
    fix="Run one SGLang release (one image tag) on every prefill and decode.",
)
def one_release(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """The bootstrap /route reply, the ZMQ registration message and the KV region layout
    change between releases; kvcheck checks each pair with each side's own release, but
    a mixed fleet is untested by SGLang itself."""
    chk = CLUSTER_CHECKS["one-release"]
    by: dict[str, InstanceResult] = {}
    for ir in instances:
        if ir.release and ir.release_source != "" and not ir.release_source.startswith("assumed"):
            by.setdefault(ir.release, ir)
    if len(by) <= 1:
        return []
    desc = ", ".join(f"{rel} ({ir.instance.name}: {ir.release_source})" for rel, ir in by.items())
    return [
        finding(
            chk.id,
            chk.severity,
            f"{len(by)} SGLang releases in one deployment: {desc}",
            chk.fix,
            list(by.values())[1].instance.location,
        )
    ]


@cluster_check(
    "one-backend",
    Severity.ERROR,
    what="Servers of one deployment use different --disaggregation-transfer-backend values.",
    fix="Set one --disaggregation-transfer-backend (nixl) on every prefill and decode.",
)
def one_backend(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """Every prefill/decode pair must agree on the backend (a Mooncake decode's first ZMQ
    message kills a NIXL prefill's bootstrap thread, nixl/conn.py 0.5.23); with several
    backends in one deployment some pair always disagrees once the router mixes them."""
    from kvcheck.sglang.args import effective_transfer_backend

    chk = CLUSTER_CHECKS["one-backend"]
    by: dict[str, InstanceResult] = {}
    for ir in instances:
        if _known(ir, "disaggregation_transfer_backend"):
            # mooncake_tcp is mooncake over TCP (args.effective_transfer_backend): one backend
            by.setdefault(str(effective_transfer_backend(_arg(ir, "disaggregation_transfer_backend", "mooncake"))), ir)
    if len(by) <= 1:
        return []
    desc = ", ".join(f"{b} ({ir.instance.role} {ir.instance.name})" for b, ir in by.items())
    second = list(by.values())[1]
    return [
        finding(
            chk.id,
            chk.severity,
            f"{len(by)} transfer backends in one deployment: {desc}",
            chk.fix,
            _loc(second, "--disaggregation-transfer-backend"),
        )
    ]


@cluster_check(
    "multinode-args",
    Severity.ERROR,
    what="An instance spanning several nodes whose nodes disagree on --nnodes, --tp-size, --pp-size, --dp-size or "
    "--dist-init-addr, or whose --node-rank values are not 0..nnodes-1.",
    fix="Launch every node of one instance with the same --nnodes, --tp-size, --dist-init-addr (node 0's address) "
    "and a distinct --node-rank from 0 to nnodes-1.",
)
def multinode_args(dep: Deployment, instances: list[InstanceResult]) -> list[Located]:
    """SGLang 0.5.23 builds one torch.distributed group over ``nnodes`` nodes at
    ``--dist-init-addr`` (node rank 0's address); each node's ranks are
    ``node_rank * (tp*pp/nnodes) ...``. Nodes that disagree never form the group (the
    launch hangs at init) or build different KV geometries."""
    chk = CLUSTER_CHECKS["multinode-args"]
    out: list[Located] = []
    for ir in instances:
        inst = ir.instance
        argvs = inst.node_argvs or [inst.argv]
        if len(argvs) <= 1 and inst.nodes <= 1:
            continue
        if ir.args_partial:
            continue  # its nodes' --nnodes, ranks and sizes may be in a --config file not read
        parsed = [p for p in (_node_args(a, str(inst.location)) for a in argvs) if p is not None]
        if len(parsed) != len(argvs):  # a node's flags do not parse
            continue
        locs = list(inst.node_locations) if len(inst.node_locations) == len(argvs) else [None] * len(argvs)
        for dest, flag in (
            ("nnodes", "--nnodes"),
            ("tp_size", "--tp-size"),
            ("pp_size", "--pp-size"),
            ("dp_size", "--dp-size"),
            ("dist_init_addr", "--dist-init-addr"),
        ):
            vals = [p.get(dest) for p in parsed]
            if len(set(map(str, vals))) > 1:
                nodes = ", ".join(
                    f"node {i}{f' ({locs[i]})' if locs[i] and len(set(map(str, locs))) > 1 else ''}: {v}"
                    for i, v in enumerate(vals)
                )
                why = ""
                if dest == "dist_init_addr":
                    # SGLang 0.5.23 _resolve_dist_init_method (srt/distributed/bootstrap.py):
                    # each node joins torch.distributed at tcp://<its own --dist-init-addr>
                    why = (
                        "; each node joins the torch.distributed rendezvous at its own --dist-init-addr (SGLang's "
                        "_resolve_dist_init_method), so the nodes never form one group and the launch hangs at init"
                    )
                if dest == "nnodes":
                    # SGLang 0.5.23 _calculate_rank_ranges (srt/entrypoints/engine.py): each
                    # node starts ranks from its own --nnodes, so the nodes claim overlapping
                    # TP ranks at one --dist-init-addr and torch.distributed never forms
                    why = (
                        "; each node computes its TP ranks from its own --nnodes (SGLang's "
                        "_calculate_rank_ranges), so they claim overlapping ranks at one --dist-init-addr and "
                        "distributed init hangs or fails"
                    )
                out.append(
                    finding(
                        chk.id,
                        chk.severity,
                        f"{inst.name}: its {len(argvs)} nodes disagree on {flag}: {nodes}{why}",
                        chk.fix,
                        _loc(ir, flag),
                    )
                )
        nnodes = parsed[0].get("nnodes", 1)
        if len(argvs) > 1 or inst.nodes > 1:
            if int(nnodes or 1) != max(inst.nodes, len(argvs)):
                out.append(
                    finding(
                        chk.id,
                        chk.severity,
                        f"{inst.name}: --nnodes {nnodes}, but the instance runs on {max(inst.nodes, len(argvs))} "
                        "node(s)",
                        chk.fix,
                        _loc(ir, "--nnodes"),
                    )
                )
            if len(argvs) > 1:
                ranks = sorted(int(p.get("node_rank", 0) or 0) for p in parsed)
                if ranks != list(range(len(argvs))):
                    out.append(
                        finding(
                            chk.id,
                            chk.severity,
                            f"{inst.name}: --node-rank values {ranks}, expected 0..{len(argvs) - 1} (one per node)",
                            chk.fix,
                            _loc(ir, "--node-rank"),
                        )
                    )
            if not parsed[0].get("dist_init_addr") and int(nnodes or 1) > 1:
                out.append(
                    finding(
                        chk.id,
                        chk.severity,
                        f"{inst.name}: --nnodes {nnodes} without --dist-init-addr: the nodes cannot find node rank 0",
                        chk.fix,
                        _loc(ir, "--nnodes"),
                    )
                )
            tp, pp = int(parsed[0].get("tp_size", 1) or 1), int(parsed[0].get("pp_size", 1) or 1)
            n = int(nnodes or 1)
            if n > 1 and (tp * pp) % n:
                out.append(
                    finding(
                        chk.id,
                        chk.severity,
                        f"{inst.name}: --tp-size {tp} x --pp-size {pp} GPUs cannot be split evenly over --nnodes {n}",
                        chk.fix,
                        _loc(ir, "--nnodes", "--tp-size"),
                    )
                )
    return out


ALL_FINDING_IDS = tuple(CLUSTER_CHECKS)
