"""Which releases' start-up kvcheck decides, and where a release's own steps are not restated.

``STARTUP_VERIFIED_RELEASES`` lists the SGLang releases whose start-up refusals the restated
steps (``kvcheck.sglang.startup.ORDER``, with their release branches) were measured against,
release by release, with that release's own ``prepare_server_args`` -> resolution ->
``check_server_args`` (``benchmarks/measure_startup_releases.py``, ``tests/startup_worker.py``).
A side on any other release (older than 0.5.5, newer than the newest modeled, not modeled) is
``unchecked`` (``ReleaseStop``) in start-up, as in the PD path: fail closed. (It is the
start-up entry of the release manifest; it moves into ``kvcheck/release/`` when that lands.)

Within the verified releases, the steps are restated with a branch per release that introduced
or changed them. Where a release before ``STARTUP_RESTATED_FROM`` runs a step kvcheck has not
restated for it, a side whose flags reach that step (``unrestated_steps``) is a ``ReleaseStop``;
every other side of that release is decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from kvcheck.sglang.startup.base import Stop, _env_bool, _is_dsa, _raw, release_at_least
from kvcheck.sides import Side

# The releases whose start-up is verified (measured against each one's own code, 0 disagreements
# outside the steps ``unrestated_steps`` names). Kept here until the release manifest lands.
STARTUP_VERIFIED_RELEASES: tuple[str, ...] = (
    "0.5.5",
    "0.5.5.post1",
    "0.5.5.post2",
    "0.5.5.post3",
    "0.5.6",
    "0.5.6.post1",
    "0.5.6.post2",
    "0.5.7",
    "0.5.8",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
STARTUP_VERIFIED_FROM = STARTUP_VERIFIED_RELEASES[0]
# From this release on every restated step is that release's own (no ``unrestated_steps``).
STARTUP_RESTATED_FROM = "0.5.22"


@dataclass(frozen=True)
class ReleaseStop(Stop):
    """A ``Stop`` because of the side's SGLang release: one whose start-up kvcheck has not
    verified, or a step of that release the side's flags reach that kvcheck does not restate
    for it; ``release`` names it. The scheduler's connector checks (``connector_outcome``,
    with their own release gates) still run after it: the ``connector-startup`` check reads them."""

    release: str = ""


def startup_verified(version: str | None) -> TypeGuard[str]:
    """Whether ``version``'s start-up is one kvcheck decides (``STARTUP_VERIFIED_RELEASES``)."""
    return version in STARTUP_VERIFIED_RELEASES


def release_gate(side: Side) -> ReleaseStop | None:
    """A ``ReleaseStop`` for a side whose release kvcheck has not verified, or whose flags
    reach a step of its release that is not restated (``unrestated_steps``), else ``None``."""
    from kvcheck.sglang.releases import side_release

    version = side_release(side)[0]
    if not startup_verified(version):
        name = version or "unknown"
        return ReleaseStop(
            f"SGLang {name}: kvcheck has not verified this release's start-up refusals (argument resolution and "
            f"check_server_args; verified: {STARTUP_VERIFIED_RELEASES[0]} .. {STARTUP_VERIFIED_RELEASES[-1]})",
            release=name,
        )
    differs = unrestated_steps(side)
    if not differs:
        return None
    return ReleaseStop(
        f"SGLang {version}: its start-up refusals (argument resolution and check_server_args) differ from the steps "
        f"kvcheck restates where these flags reach them ({', '.join(differs)}) and kvcheck has not restated "
        "them for this release",
        release=version,
    )


def unrestated_steps(side: Side) -> list[str]:
    """The inputs of a side that reach start-up steps its release (before ``STARTUP_RESTATED_FROM``)
    runs differently from the restated ones, measured on the start-up corpus against each
    release's own code. Everything else (TP, DP attention, PP without speculation, nodes, page
    size, chunked prefill, the transfer backend, the attention backends trtllm_mla / trtllm_mha /
    fa3 / flashinfer / triton per GPU, fp8/bf16 KV dtypes, EAGLE/NEXTN topk 1, two-batch
    overlap) is restated per release."""
    if release_at_least(side, STARTUP_RESTATED_FROM):
        return []
    a = side.args
    kv = a.kv_cache_dtype
    backends = {a.attention_backend, a.prefill_attention_backend, a.decode_attention_backend}
    topk = a.speculative_eagle_topk
    algo = (a.speculative_algorithm or "").upper()
    return [
        name
        for name, on in (
            ("a DSA model with an attention backend flag", _is_dsa(side) and backends != {None}),
            ("FP4 / MXFP8 KV cache", kv in ("nvfp4", "fp4_e2m1", "fp4_mx_block16", "mxfp8")),
            ("the cutedsl_mla / fa4 backends", bool(backends & {"cutedsl_mla", "fa4"})),
            ("CP / DCP", a.attn_cp_size > 1 or a.dcp_size > 1 or bool(a.enable_prefill_cp)),
            (
                "speculative decoding other than EAGLE/NEXTN with topk 1",
                bool(algo) and not (algo in ("EAGLE", "NEXTN") and topk in (None, 1)),
            ),
            # HiSparse: the model family, radix-cache, KV-dtype and mixed-chunk checks are restated per
            # release (0.5.10 .. 0.5.23, resolution.validate_hisparse); its DSA backend checks and its
            # speculative paths are not.
            ("HiSparse with speculative decoding", bool(a.enable_hisparse) and bool(algo)),
            # DSA backend flags: 0.5.5 .. 0.5.11 refuse nothing on them outside HiSparse (only
            # check_server_args' HiSparse loop reads --nsa-*-backend); from 0.5.12 the DSA overrides
            # and hisparse_hook check them by rules kvcheck restates for 0.5.22+ only.
            (
                "a DSA model with a DSA backend flag",
                _is_dsa(side)
                and _dsa_backend_flags(side)
                and (bool(a.enable_hisparse) or release_at_least(side, "0.5.12")),
            ),
            # HiCache: _handle_hicache refuses nothing before 0.5.17 (it picks I/O backends and layouts);
            # 0.5.17 .. 0.5.21 add only the HiCache + DCP checks (_resolve_hicache_dcp_compatibility,
            # 0.5.19 hicache_hook), reached through "CP / DCP" above; the HiCache / radix-cache
            # exclusion has the same text and place from 0.5.5 (measured 0.5.5 .. 0.5.21).
            (
                "--disaggregation-decode-enable-offload-kvcache",
                bool(_raw(side, "disaggregation_decode_enable_offload_kvcache", False)),
            ),
            ("the decode radix cache", bool(a.disaggregation_decode_enable_radix_cache)),
            ("KV sharding", bool(a.enable_kv_cache_sharding)),
            # a flag given, not the release's own default (0.5.21's default threshold is 0: host receive off)
            (
                "decode retraction / host receive",
                a.disaggregation_decode_retraction_backup is not None
                or _raw(side, "disaggregation_decode_host_receive_threshold", None) is not None,
            ),
            ("--disaggregation-decode-allocation-policy", a.disaggregation_decode_allocation_policy != "early"),
            ("SGLANG_DISAGG_STAGING_BUFFER", _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER")),
            # 0.5.15 .. 0.5.21 refuse these by other rules and texts (0.5.15 .. 0.5.17: unified
            # memory "is not yet compatible with PD disaggregation"; page-major Triton-only)
            (
                "--enable-unified-memory / --enable-page-major-kv-layout",
                bool(_raw(side, "enable_unified_memory", False) or _raw(side, "enable_page_major_kv_layout", False)),
            ),
        )
        if on
    ]


def _dsa_backend_flags(side: Side) -> bool:
    """Whether the side sets a DSA (NSA) prefill/decode backend (``--dsa-*-backend``, the older
    ``--nsa-*-backend``): each release resolves and checks them by its own rule."""
    raw = side.raw_args or {}
    return any(raw.get(f"{p}_{r}_backend") for p in ("dsa", "nsa") for r in ("prefill", "decode"))
