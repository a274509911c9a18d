"""What a deployment reader returns: instances of SGLang servers, routers, and problems.

One ``Instance`` is one prefill or decode server as the deployment runs it: possibly
replicated (``replicas``) and possibly spanning several nodes (``nodes``, one launch
line per node in ``node_argvs``). Its role comes from ``--disaggregation-mode``, never
from names. ``argv`` holds the SGLang server args only (launcher tokens such as
``python3 -m sglang.launch_server`` removed; Dynamo's own worker flags removed and kept
in ``launcher_args``), after shell / Kubernetes variable resolution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["prefill", "decode"]


@dataclass(frozen=True)
class Location:
    """Where something was written: a file and a 1-based line (None when unknown)."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class Unresolved:
    """A variable that could not be resolved: ``$TP`` in ``--tp-size ${TP}``.

    ``flag`` is the option it feeds (None when it is not an option's value)."""

    variable: str
    flag: str | None
    location: Location
    # the reference as the file writes it (``${PREFILL_PORT}``, ``$(MODEL_PATH)``,
    # ``<NODE_RANK>``), for messages; empty: ``${variable}``
    written: str = ""
    # the server's environment variable whose value it leaves unknown (``export
    # UCX_TLS=$TLS``, a Kubernetes ``valueFrom`` Secret); --prefill-env/--decode-env
    # giving that variable settles it
    env_var: str | None = None
    # where the platform takes the variable's value, when the file says so (a Kubernetes
    # ``valueFrom``: "the pod's field status.podIP (downward API)..."); empty: unknown
    origin: str = ""

    @property
    def shown(self) -> str:
        return self.written or (
            f"${{{self.variable}}}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.variable) else self.variable
        )


@dataclass
class Instance:
    """One prefill or decode server of a deployment.

    ``argv``: SGLang args of node rank 0 (tokens, e.g. ``["--model-path", "x", "--tp", "8"]``);
    ``node_argvs``: one argv per node when the instance spans several nodes (``nodes`` > 1),
    else ``[argv]``; ``arg_locations``: option string as written -> where it was set;
    ``env``: the server's environment (resolved); ``replicas``: copies of this instance;
    ``gpus``: GPUs per node when the input says; ``image``: container image reference;
    ``gpu_type``: GPU kind when the input says (``h100``, ``b200``, ``gb200``...), with
    ``gpu_source`` naming where it came from; ``launcher``: ``sglang.launch_server``,
    ``sglang serve``, ``dynamo.sglang``...; ``launcher_args``: the launcher's own flags
    that are not SGLang's; ``hosts``: node / host names when known (for port clashes);
    ``unresolved``: variables left unresolved in this instance's args;
    ``symbolic``: unresolved values of address, port and rank options (``--host``,
    ``--dist-init-addr``, ``--port``, ``--node-rank``...; ``addresses.ADDRESS_DESTS``): filled
    in at run time, they shape no KV transfer, so they are info, not unchecked.

    Added by the readers (``kvcheck.sources.deployments.read_deployments``):
    ``port``: the HTTP port the server listens on (``--port``, else SGLang's default
    30000; None for ``dynamo.sglang`` workers, which serve through Dynamo);
    ``host_network``: True when the server shares its node's network namespace (a bare
    process, Kubernetes ``hostNetwork: true``, ``docker run --network host``), False for a
    pod or container with its own, None when unknown (two instances can clash on a port
    only when they share a network namespace on one node); ``model``: the model the
    deployment names when ``--model-path`` does not (srt-slurm's ``model.path`` alias);
    ``kind``: the workload that runs it (``Deployment``, ``LeaderWorkerSet``,
    ``DynamoGraphDeployment``, ``srt-slurm``, ``script``...); ``node_locations``: where
    each node's launch line is (scripts with one line per node rank);
    ``release_clues``: what the input says about the SGLang release beyond ``image``
    (``kvcheck.sources.release_clues.ReleaseClue``: recipe pins, pip lines, Dynamo versions);
    ``model_clues``: ``(name, clue)`` pairs a reader found for the model beside
    ``--model-path`` (srt-slurm ``identity.model.repo``, an OME base model...); ``model``
    and ``model_clue`` are then set to the hub id a clue names and which clue it was
    (``kvcheck.sources.models.clues``), tried when ``--model-path`` names nothing kvcheck has;
    ``args_hidden``: the ``config-not-read``/``config-refused`` problem of a ``--config``
    file kvcheck could not take (the args beyond the line's are then unknown).
    """

    role: Role
    name: str
    location: Location
    argv: list[str]
    node_argvs: list[list[str]] = field(default_factory=list)
    arg_locations: dict[str, Location] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    replicas: int = 1
    nodes: int = 1
    gpus: int | None = None
    image: str | None = None
    gpu_type: str | None = None
    gpu_source: str = ""
    launcher: str = "sglang.launch_server"
    launcher_args: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    symbolic: list[Unresolved] = field(default_factory=list)
    port: int | None = None
    host_network: bool | None = None
    model: str | None = None
    kind: str = ""
    node_locations: list[Location] = field(default_factory=list)
    release_clues: list = field(default_factory=list)
    model_clues: list = field(default_factory=list)
    # a --config file of the launch line kvcheck could not take (``config-not-read``,
    # ``config-refused``): the args the line does not give itself are unknown, so no
    # check may fill them in with SGLang's defaults
    args_hidden: Problem | None = None
    model_clue: str = ""
    # the first hub id the file names that kvcheck's catalog does not hold: (name, clue)
    model_named: tuple = ()
    # the values this server takes from a file named inside its input (a launch line's
    # --config): never shown in a message (SECURITY.md, promise 3)
    inner_values: frozenset[str] = frozenset()
    # warnings about a file read for this server beside its own line (a ``duplicate-key``
    # of its --config), reported with its findings (``kvcheck.cluster.instances``)
    read_notes: list[Problem] = field(default_factory=list)


@dataclass
class RouterPrefill:
    """One ``--prefill URL [BOOTSTRAP_PORT]`` of a router line. ``instance``: the name of
    the prefill ``Instance`` the URL points at (matched by host and port), None when
    kvcheck could not tell."""

    url: str
    bootstrap_port: int | None = None
    instance: str | None = None


@dataclass
class Router:
    """An ``sglang_router.launch_router --pd-disaggregation`` line (or its manifest).

    ``prefills``/``decodes``: the URLs as written (``--prefill URL [BOOTSTRAP_PORT]``);
    ``service_discovery``: ``--service-discovery`` (the router finds pods by label, so
    there are no URLs); ``argv``: the router's args; ``decode_instances``: for each
    decode URL, the name of the decode ``Instance`` it points at, or None (see
    ``RouterPrefill.instance``); ``name``: the workload or ``router@file:line``;
    ``image``: the router's container image when known."""

    location: Location
    prefills: list[RouterPrefill] = field(default_factory=list)
    decodes: list[str] = field(default_factory=list)
    service_discovery: bool = False
    argv: list[str] = field(default_factory=list)
    decode_instances: list[str | None] = field(default_factory=list)
    name: str = ""
    image: str | None = None


@dataclass
class Problem:
    """Something a reader could not take as written, reported as a named finding:
    ``id`` (e.g. ``unresolved-variable``, ``no-sglang-container``), a one-line message
    naming the file and line, and a fix."""

    id: str
    message: str
    location: Location
    fix: str = ""
    # the server it is about was dropped because its role may be in what was not read
    # (a --config file inside the image, an unset variable): a missing role is unknown
    hides_role: bool = False


@dataclass
class Deployment:
    """One deployment: its instances and routers. A recipe with sweeps gives one
    ``Deployment`` per variant (``variant`` names it, e.g. ``sweep[2] tp=8``)."""

    name: str
    source: Location
    instances: list[Instance] = field(default_factory=list)
    routers: list[Router] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    variant: str | None = None
