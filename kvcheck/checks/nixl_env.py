"""Checks of the NIXL environment each side starts with: the backend plugin and its
parameters (``SGLANG_DISAGGREGATION_NIXL_BACKEND`` and ``..._BACKEND_PARAMS``), read by
``NixlKVManager.__init__`` in SGLang 0.5.23 (defaults ``UCX`` and ``{}``)."""

from __future__ import annotations

import json

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sglang.plan import RuntimeErrorPrediction
from kvcheck.sides import Side

BACKEND_VAR = "SGLANG_DISAGGREGATION_NIXL_BACKEND"
PARAMS_VAR = "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS"
DEFAULT_BACKEND = "UCX"
# Backend plugins NIXL 1.5 ships or documents; another name fails at start-up with
# "NIXL backend '<name>' not found. Available: [...]" (the list is the node's plugins).
KNOWN_BACKENDS = (
    "UCX",
    "UCCL",
    "LIBFABRIC",
    "GDS",
    "GDS_MT",
    "POSIX",
    "OBJ",
    "Mooncake",
    "HF3FS",
    "GPUNETIO",
    "AZURE_BLOB",
)
STARTS_AND_EXITS = "the server exits during start-up with this error, after loading the model and before serving"


def _nixl_sides(ctx: CheckContext) -> list[Side]:
    return [s for s in (ctx.prefill, ctx.decode) if s.args.disaggregation_transfer_backend == "nixl"]


def backend_of(side: Side) -> str:
    """The NIXL backend plugin the side creates (``SGLANG_DISAGGREGATION_NIXL_BACKEND``)."""
    return side.env.get(BACKEND_VAR) or DEFAULT_BACKEND


@check(
    "nixl-backend-params",
    Severity.ERROR,
    "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS is a JSON object of strings",
    what="A side's SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS that is not valid JSON, or not an object with string "
    "keys and string values.",
    why="NixlKVManager.__init__ parses it with json.loads before creating the backend; the server fails at start-up.",
    fix='Set it to a JSON object of strings, e.g. {"num_threads": "8"}, or unset it.',
)
def nixl_backend_params(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    for side in _nixl_sides(ctx):
        raw = side.env.get(PARAMS_VAR)
        if raw is None:
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            rt = RuntimeErrorPrediction(
                type="JSONDecodeError",
                message=str(exc),
                raised_by=f"{side.role}: NixlKVManager.__init__ (start-up)",
                when="start-up",
                operator_sees=STARTS_AND_EXITS,
            )
            out.append(chk.finding(f"{side.role}: {PARAMS_VAR}={raw!r} is not valid JSON", runtime_error=rt))
            continue
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            rt = RuntimeErrorPrediction(
                type="ValueError",
                message="SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS must be a JSON object with string keys and string "
                "values",
                raised_by=f"{side.role}: NixlKVManager.__init__ (start-up)",
                when="start-up",
                operator_sees=STARTS_AND_EXITS,
            )
            out.append(
                chk.finding(
                    f"{side.role}: {PARAMS_VAR}={raw!r} is not a JSON object of strings (numbers must be quoted)",
                    runtime_error=rt,
                )
            )
    return out


@check(
    "nixl-backend",
    Severity.ERROR,
    "Both sides create the same known NIXL backend",
    what="SGLANG_DISAGGREGATION_NIXL_BACKEND differs between prefill and decode, or names a plugin NIXL does not ship.",
    why=(
        "Each side creates only that one backend; the prefill's transfers need a backend the decode's agent also "
        "published, so different backends never connect (transfers fail, requests time out). An unknown plugin name "
        "fails at start-up: NIXL backend '<name>' not found."
    ),
    fix="Set the same SGLANG_DISAGGREGATION_NIXL_BACKEND (default UCX) on both servers.",
)
def nixl_backend(chk, ctx: CheckContext) -> list[Finding]:
    sides = _nixl_sides(ctx)
    out = []
    for side in sides:
        name = backend_of(side)
        if name not in KNOWN_BACKENDS:
            near = [k for k in KNOWN_BACKENDS if k.lower() == name.lower() or k.lower().startswith(name.lower()[:3])]
            hint = f"; did you mean {near[0]}?" if near else ""
            out.append(
                chk.finding(
                    f"{side.role}: {BACKEND_VAR}={name} is not a NIXL backend plugin "
                    f'({", ".join(KNOWN_BACKENDS)}){hint}; the server fails at start-up with "NIXL backend '
                    f"'{name}' not found\""
                )
            )
    if len(sides) == 2 and backend_of(sides[0]) != backend_of(sides[1]):
        out.append(
            chk.finding(
                f"NIXL backends differ: prefill {BACKEND_VAR}={backend_of(sides[0])}, decode "
                f"{BACKEND_VAR}={backend_of(sides[1])}: the two agents share no backend"
            )
        )
    return out


UCX_NET_DEVICES_WARNING = (
    "UCX_NET_DEVICES is set; ignoring --disaggregation-ib-device for NIXL UCX. "
    "Per-GPU CLI device mappings will not be applied."
)


@check(
    "connector-startup",
    Severity.ERROR,
    "Each server's PD queue and NIXL KV manager accept the environment and the IB devices",
    what=(
        "SGLANG_DISAGG_STAGING_BUFFER on an MLA model, on a prefill whose chunked-prefill size is not a positive "
        "multiple "
        "of the page size (-1: chunking off), or with PP on a non-Mooncake prefill; "
        "--disaggregation-ib-device with port suffixes (mlx5_0:1), a per-GPU JSON mapping that is invalid or misses "
        "a GPU the server binds, or a device_list in SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS that disagrees with it; "
        "UCX_NET_DEVICES overriding --disaggregation-ib-device (warning). A side whose PD start-up kvcheck cannot "
        "fully predict (a release whose connector start-up it has not measured, an input it cannot read) is "
        "connector-startup at unchecked."
    ),
    why=(
        "PrefillBootstrapQueue/DecodePreallocQueue and NixlKVManager.__init__ (SGLang 0.5.23) raise these after the "
        "model is loaded: the scheduler exits and the server never serves."
    ),
    fix="Give HCA names without ports (mlx5_0,mlx5_1), one device selection (the flag or device_list), and no "
    "staging buffer on MLA models.",
)
def connector_startup(chk, ctx: CheckContext) -> list[Finding]:
    from kvcheck.sglang.startup import Refusal as _Refusal
    from kvcheck.sglang.startup import ReleaseStop, connector_outcome, first_outcome
    from kvcheck.sglang.startup import Stop as _Stop

    out = []
    for side in (ctx.prefill, ctx.decode):
        first = first_outcome(side)
        if first is not None and not isinstance(first, ReleaseStop):
            continue  # the server stops earlier (the startup check says why), or kvcheck cannot tell
        r = connector_outcome(side)
        if isinstance(r, _Stop):
            out.append(
                chk.finding(
                    f"{side.role}: the scheduler's PD start-up is not fully predicted: {r.reason}",
                    severity=Severity.UNCHECKED,
                    fix="Check the named input on the server.",
                )
            )
        elif isinstance(r, _Refusal):
            fix = chk.fix
            if r.id == "hisparse-host-as-vram":
                fix = (
                    "Run SGLang 0.5.15 or newer on the decode (NIXL DRAM KV destinations for HiSparse, "
                    "sgl-project/sglang#27563), "
                    "or serve the decode without --enable-hisparse: before 0.5.15 the decode registers its HiSparse "
                    "host KV pool "
                    "as VRAM, which NIXL >= 1.0.0 refuses ('VRAM memory is detected as host by UCX')."
                )
            if r.id == "minimax-index-value":
                fix = (
                    "Serve this MiniMax checkpoint without PD disaggregation, or one whose sparse layers all disable "
                    "the index "
                    "value (sparse_disable_index_value 1): SGLang 0.5.23 transfers only K-only sparse layers."
                )
            said = r.message
            if r.id == "hisparse-host-as-vram":
                said = (
                    "NixlKVManager registers the decode's HiSparse host KV pool as VRAM (SGLang before 0.5.15) and "
                    "NIXL "
                    f"{server_nixl_text(side)} refuses it: nixlBackendError: {r.message} (NIXL logs 'VRAM memory is "
                    "detected "
                    "as host by UCX ... VRAM registration cannot proceed')"
                )
            out.append(
                Finding(
                    id=r.id,
                    severity=Severity.ERROR,
                    message=f"the {side.role} server exits after loading the model ({side.origin or side.role}): "
                    f"{said}",
                    fix=fix,
                    runtime_error=r.prediction(side),
                )
            )
        if (
            side.args.disaggregation_transfer_backend == "nixl"
            and backend_of(side) == "UCX"
            and side.args.disaggregation_ib_device
            and side.env.get("UCX_NET_DEVICES")
        ):
            out.append(
                chk.finding(
                    f"{side.role}: UCX_NET_DEVICES={side.env['UCX_NET_DEVICES']} overrides --disaggregation-ib-device "
                    f"{side.args.disaggregation_ib_device}; the runtime logs: {UCX_NET_DEVICES_WARNING}",
                    severity=Severity.WARNING,
                    fix="Set only one of UCX_NET_DEVICES and --disaggregation-ib-device.",
                )
            )
    return out


def server_nixl_text(side) -> str:
    from kvcheck.sglang.server_nixl import server_nixl

    got = server_nixl(side)
    return f"{got.describe()} ({got.source})"
