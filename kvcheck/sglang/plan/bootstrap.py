"""The decode's bootstrap checks, restated: its first contact with the prefill bootstrap
server (``CommonKVManager.try_ensure_parallel_info`` and ``_resolve_rank_mapping`` in
``disaggregation/common/conn.py``; ``CommonKVReceiver.__init__`` on the v1 ``/route``
reply before 0.5.10), raised in the decode's scheduler on the first request.
"""

from __future__ import annotations

from typing import cast

from kvcheck.sglang.pd_release import at_least
from kvcheck.sglang.plan.model import (
    DECODE_FIRST_REQUEST,
    DECODE_RECEIVER_V1,
    DECODE_SCHEDULER,
    PairInfo,
    RuntimeErrorPrediction,
)


def _assert_text(message: str) -> str:
    """``str(AssertionError((message,)))``: the runtime's asserts carry a 1-tuple."""
    return str(AssertionError((message,)))


def _pp_assert(prefill: PairInfo, decode: PairInfo) -> str:
    """The decode's PP assert (``_resolve_rank_mapping``; 0.5.6.post1 on), as it prints."""
    return _assert_text(
        f"Decode pp size ({decode.pp_size}) should be equal to prefill pp size ({prefill.pp_size}) or 1"
    )


# Finding ids of the decode's bootstrap checks, in the runtime's order.
BOOTSTRAP_CHECK_IDS = (
    "page-size-mismatch",
    "kv-cache-dtype-mismatch",
    "minimax-attn-tp",
    "kv-layout-mismatch",
    "dsv41-layout-mismatch",
    "dsv41-attn-tp",
    "mxfp8-attn-tp",
    "decode-dcp",
    "kv-cache-sharding-tp",
    "decode-cp-size",
    "pp-size-mismatch",
)


def bootstrap_checks(prefill: PairInfo, decode: PairInfo, behaviour=None) -> list[tuple[str, RuntimeErrorPrediction]]:
    """Every check the decode's ``try_ensure_parallel_info`` (and ``_resolve_rank_mapping``)
    of the decode's release fails on this pair, each evaluated on its own, in the order the
    runtime runs them: ``[(finding id, prediction), ...]``. The runtime raises only the
    first; the others surface one by one as each is fixed.

    ``behaviour``: the decode's ``PDBehaviour`` (None: 0.5.23); each branch names the
    release that introduced it. Raises ``ValueError`` when that release's bootstrap checks
    are not modeled (the caller reports ``unchecked``).
    """
    from kvcheck.sglang.pd_release import behaviour as _behaviour

    b = behaviour or _behaviour(None)
    if not b.bootstrap_modeled:
        raise ValueError(f"the decode bootstrap checks of SGLang {b.version} are not modeled")
    out: list[tuple[str, RuntimeErrorPrediction]] = []
    raised_by = DECODE_RECEIVER_V1 if b.route == "v1" else DECODE_SCHEDULER

    def err(fid: str, type_: str, message: str) -> None:
        out.append(
            (
                fid,
                RuntimeErrorPrediction(
                    type=type_,
                    message=message,
                    raised_by=raised_by,
                    when="first request",
                    operator_sees=DECODE_FIRST_REQUEST,
                ),
            )
        )

    def page_size_mismatch() -> None:
        err(
            "page-size-mismatch",
            "RuntimeError",
            f"Page size mismatch: prefill server has page_size={prefill.page_size}, "
            f"but decode server has page_size={decode.page_size}. "
            f"Both servers must use the same --page-size value.",
        )

    if b.route == "v1":
        # 0.5.5 .. 0.5.9 (CommonKVReceiver.__init__ on the v1 /route reply): the page-size
        # check (0.5.8, with prefill_page_size in the reply), then the PP assert
        # (0.5.6.post1). No kv-cache-dtype, CP or DCP check exists before 0.5.10; what a
        # pair the missing checks let through then does: ``bootstrap_unchecked``.
        if at_least(cast(str, b.bootstrap_variant), "0.5.8") and prefill.page_size != decode.page_size:
            page_size_mismatch()
        if at_least(cast(str, b.bootstrap_variant), "0.5.6.post1") and not (
            decode.pp_size == prefill.pp_size or decode.pp_size == 1
        ):
            err("pp-size-mismatch", "AssertionError", _pp_assert(prefill, decode))
        return out

    # 0.5.10: page size (0.5.10 .. 0.5.12.post1: a HiSparse decode only logs it).
    if prefill.page_size != decode.page_size and not (b.hisparse_skips_page_size and decode.hisparse):
        page_size_mismatch()
    # 0.5.10: the --kv-cache-dtype strings; 0.5.17: the resolved kv_cache_dtype_str.
    resolved = at_least(cast(str, b.bootstrap_variant), "0.5.17")
    p_dtype = prefill.kv_cache_dtype_str if resolved else prefill.flag_dtype
    d_dtype = decode.kv_cache_dtype_str if resolved else decode.flag_dtype
    if p_dtype != d_dtype:
        err(
            "kv-cache-dtype-mismatch",
            "RuntimeError",
            f"KV cache dtype mismatch: prefill server has kv_cache_dtype={p_dtype}, "
            f"but decode server has kv_cache_dtype={d_dtype}. "
            f"Both servers must use the same --kv-cache-dtype value.",
        )
    if b.newest_bootstrap:  # 0.5.23: MiniMax sparse TP, then the DSV4 KV layout
        if "minimax_index_k" in decode.state_types and prefill.attn_tp_size != decode.attn_tp_size:
            err(
                "minimax-attn-tp",
                "RuntimeError",
                "MiniMax sparse PD requires matching attention TP sizes: "
                f"prefill={prefill.attn_tp_size}, decode={decode.attn_tp_size}.",
            )
        if prefill.kv_layout is not None and decode.kv_layout is not None and prefill.kv_layout != decode.kv_layout:
            err(
                "kv-layout-mismatch",
                "RuntimeError",
                f"KV layout mismatch: prefill server has kv_layout={prefill.kv_layout}, "
                f"but decode server has kv_layout={decode.kv_layout}. Both servers "
                f"must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT.",
            )
    dsv41 = b.dsv41_checks  # 0.5.21
    if dsv41 and (decode.dsv41_spec_layout is not None or prefill.dsv41_spec_layout is not None):
        mine, theirs = decode.dsv41_spec_layout or {}, prefill.dsv41_spec_layout or {}
        if decode.dsv41_spec_layout != prefill.dsv41_spec_layout:
            fields = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            err(
                "dsv41-layout-mismatch",
                "RuntimeError",
                "DeepSeek-V4.1 DSpark PD layout mismatch "
                f"({', '.join(fields)}): both servers must "
                "enable DSpark with the same block size and target/draft KV "
                "layout. Upgrade both servers together.",
            )
        if dsv41 == "same_tp":
            if prefill.attn_tp_size != decode.attn_tp_size:
                err(
                    "dsv41-attn-tp", "RuntimeError", "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers"
                )
        else:  # 0.5.22: a MLA decode whose TP equals the prefill's TP x CP is admitted
            aligns = (
                prefill.attn_cp_size > 1
                and (decode.is_mla or decode.is_hybrid_mla)
                and decode.attn_cp_size == 1
                and prefill.attn_tp_size * prefill.attn_cp_size == decode.attn_tp_size
            )
            if prefill.attn_tp_size != decode.attn_tp_size and not aligns:
                err(
                    "dsv41-attn-tp",
                    "RuntimeError",
                    "DeepSeek-V4.1 DSpark PD requires the same TP size on both "
                    "servers (including prefill CP ranks for MLA)",
                )
    # 0.5.22: MXFP8 block scales cannot be resliced across attention TP sizes.
    if (
        b.mxfp8_tp_check
        and prefill.attn_tp_size != decode.attn_tp_size
        and not decode.is_mla
        and not decode.is_hybrid_mla
    ):
        scales = [st for st in decode.state_types if st in ("block_scale", "block_scale_swa")]
        if scales:
            err(
                "mxfp8-attn-tp",
                "RuntimeError",
                "PD Disaggregation does NOT support different attention TP "
                "sizes with MXFP8 KV cache: prefill attn_tp_size="
                f"{prefill.attn_tp_size}, decode attn_tp_size={decode.attn_tp_size}, "
                f"state types {scales}.",
            )
    # 0.5.17: decode DCP; 0.5.23: and a prefill with --enable-kv-cache-sharding.
    if b.decode_dcp_checks and decode.dcp_size > 1:
        if not (decode.is_mla or decode.is_hybrid_mla):
            err("decode-dcp", "RuntimeError", "PD decode DCP requires an MLA or hybrid-MLA KV pool.")
        elif prefill.attn_cp_size != 1:
            err(
                "decode-dcp",
                "RuntimeError",
                f"PD decode DCP currently requires prefill attention CP=1, got {prefill.attn_cp_size}.",
            )
        elif b.newest_bootstrap and prefill.enable_kv_cache_sharding:
            err(
                "decode-dcp",
                "RuntimeError",
                "PD decode DCP does not support a prefill with --enable-kv-cache-sharding.",
            )
    # _resolve_rank_mapping. 0.5.23: MLA KV sharding needs equal attention TP.
    if (
        b.newest_bootstrap
        and decode.is_mla
        and prefill.enable_kv_cache_sharding
        and prefill.attn_cp_size == 1
        and decode.attn_tp_size != prefill.attn_tp_size
    ):
        err(
            "kv-cache-sharding-tp",
            "AssertionError",
            "MLA KV cache sharding requires equal prefill/decode attn TP "
            f"sizes, got prefill={prefill.attn_tp_size} decode={decode.attn_tp_size}",
        )
    # 0.5.10: decode attention CP must be 1; decode PP equal to the prefill's or 1.
    if decode.attn_cp_size != 1:
        err(
            "decode-cp-size",
            "AssertionError",
            _assert_text(f"Decode cp size ({decode.attn_cp_size}) should be equal to 1"),
        )
    if not (decode.pp_size == prefill.pp_size or decode.pp_size == 1):
        err("pp-size-mismatch", "AssertionError", _pp_assert(prefill, decode))
    return out


def bootstrap_unchecked(prefill: PairInfo, decode: PairInfo, behaviour) -> list[str]:
    """What the decode of ``behaviour``'s release lets through unchecked and kvcheck does
    not model (each reported ``unchecked``): before 0.5.8 the v1 ``/route`` reply has no
    page size and the decode never compares it; before 0.5.6.post1 nothing checks the PP
    sizes (the receiver fetches every prefill PP rank's bootstrap info)."""
    b = behaviour
    out: list[str] = []
    if not b.bootstrap_modeled or b.route != "v1":
        return out
    if not at_least(cast(str, b.bootstrap_variant), "0.5.8") and prefill.page_size != decode.page_size:
        out.append(
            f"the decode of SGLang {b.version} does not compare page sizes (the check came in 0.5.8) and they differ "
            f"(prefill {prefill.page_size}, decode {decode.page_size}): the page indices of the two sides disagree"
        )
    if not at_least(cast(str, b.bootstrap_variant), "0.5.6.post1") and not (
        decode.pp_size == prefill.pp_size or decode.pp_size == 1
    ):
        out.append(
            f"the decode of SGLang {b.version} does not check PP sizes (the assert came in 0.5.6.post1) and they "
            "differ "
            f"(prefill {prefill.pp_size}, decode {decode.pp_size})"
        )
    return out


def bootstrap_error(prefill: PairInfo, decode: PairInfo, behaviour=None) -> RuntimeErrorPrediction | None:
    """The exception the decode raises on the prefill's ``/route`` reply (the first of
    ``bootstrap_checks``, which is what the runtime hits), or None when it accepts it."""
    found = bootstrap_checks(prefill, decode, behaviour)
    return found[0][1] if found else None
