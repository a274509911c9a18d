"""The state components of a PP>1 prefill, as SGLang 0.5.22 and 0.5.23's generic senders move them.

A PP>1 prefill (``decide_pp_component``, 0.5.22 and 0.5.23 alike): each PP stage
registers its own layers' state entries and sends them on its own; the decode pairs with
every stage at decode PP 1 (its whole model) or stage by stage at decode PP = prefill PP
(any other decode PP is refused by the decode at bootstrap). No prepared plan (it needs
PP 1), so every whole-slot component takes the generic senders:

* mamba: paired by global layer id (``get_state_layer_ids``; ``build_transfer_entry_pairs``
  without positional fallback): a decode stage without the layer raises ``Decode peer is
  missing a transfer entry for model layer N``, one without Mamba entries ``Layer
  metadata must be provided by both PD peers or neither``; unequal state TP slices the
  paired entries as at PP 1. A stage without Mamba layers posts an empty transfer
  (unchecked: NIXL's outcome).
* swa, block_scale, block_scale_swa (non-MLA, equal TP): no layer ids; K/V halves paired
  by ``get_mha_kv_ptrs_with_pp`` from the pool's start layer, which an ``SWAKVPool``
  sets to 0 on every stage: against a whole-model decode, stage s > 0 writes its layers
  into the decode's first layers, and a stage whose layer count does not divide the
  decode's (the "draft" branch) writes V into K entries -- certain silent corruption.
  Slices past the decode's entries raise numpy's ``IndexError``; a stage without
  sliding-window layers against a decode with some raises ``ZeroDivisionError``.
* dsa (and KV-shaped state on an MLA backend): flat, decode entry ``start + l``.
"""

from __future__ import annotations

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.pools.base import SWA
from kvcheck.sglang.states_base import _KV_SHAPED, StateDecision, _err, _lens

_EMPTY_STAGE = (
    "prefill PP stage {rank} registers no {t} entries: the runtime posts a NIXL transfer with empty descriptor lists "
    "for every request; its outcome is NIXL's and kvcheck does not decide it"
)


class _Raised(Exception):
    """An exception the runtime raises, restated: ``type`` (its class name) and ``message``."""

    def __init__(self, type_: str, message: str):
        super().__init__(message)
        self.type, self.message = type_, message


def _ids(g: SideGeometry, t: str) -> list[int]:
    """``kv_args.state_layer_ids`` of component ``t``: global layer ids, registered by the
    Mamba component only (``HybridLinearKVPool.get_state_layer_ids``); the other
    components register none (``setup_state_kv_args``, 0.5.22/0.5.23)."""
    return [r.layer_id for r in g.state_regions if r.state_type == t] if t == "mamba" else []


def _zero_division_text() -> str:
    try:
        1 % 0  # noqa: B018 - the interpreter's own text for int % 0
    except ZeroDivisionError as exc:
        return str(exc)
    return ""  # pragma: no cover


def _index_error(i: int, size: int) -> _Raised:
    # numpy's text for an index past the end of a 1-D array (the runtime slices np arrays).
    return _Raised("IndexError", f"index {i} is out of bounds for axis 0 with size {size}")


def entry_pairs(
    src_ids: list[int], dst_ids: list[int], n_src: int, n_dst: int, *, positional: bool
) -> list[tuple[int, int]]:
    """``build_transfer_entry_pairs`` (``disaggregation/utils.py``, 0.5.22/0.5.23): the
    (prefill entry, decode entry) pairs by layer id, each occurrence of a layer id paired
    in order (conv before temporal); ``positional``: ``allow_positional_fallback``
    (``pp_size == 1`` on the prefill). Raises ``_Raised`` with the runtime's RuntimeError
    text when the entries do not pair."""
    if n_src == 0:
        return []
    if bool(src_ids) != bool(dst_ids):
        if not positional:
            raise _Raised("RuntimeError", "Layer metadata must be provided by both PD peers or neither")
        src_ids, dst_ids = [], []
    if src_ids:
        if len(src_ids) != n_src or len(dst_ids) != n_dst:
            raise _Raised(
                "RuntimeError",
                f"Layer metadata length must match transfer entries: src metadata={len(src_ids)} entries={n_src}, "
                f"dst metadata={len(dst_ids)} entries={n_dst}",
            )
        pos: dict[int, list[int]] = {}
        for j, lid in enumerate(dst_ids):
            pos.setdefault(lid, []).append(j)
        pairs = []
        for i, lid in enumerate(src_ids):
            if not pos.get(lid):
                raise _Raised("RuntimeError", f"Decode peer is missing a transfer entry for model layer {lid}")
            pairs.append((i, pos[lid].pop(0)))
        return pairs
    if n_dst < n_src or (n_src != n_dst and not positional):
        raise _Raised(
            "RuntimeError",
            f"PP-heterogeneous transfer requires layer ids on both peers; got src={n_src} dst={n_dst} entries",
        )
    return [(i, i) for i in range(n_src)]


def transfer_start_layer(g: SideGeometry, pp_rank: int) -> int:
    """``kv_args.prefill_start_layer`` of prefill PP stage ``pp_rank``
    (``disaggregation/prefill.py::_transfer_start_layer``, 0.5.22/0.5.23): the pool's
    ``start_layer``. ``SWAKVPool`` sets it to 0 on every stage (its sub-pools hold the
    stage's layers only); the other pools kvcheck models start at the stage's first
    model layer. (A ``HybridLinearKVPool`` counts full-attention layers before the
    stage; its only state component, Mamba, pairs by layer id and never reads it.)"""
    if g.pool == SWA or not g.stage_layers:
        return 0
    return g.stage_layers[min(pp_rank, len(g.stage_layers) - 1)][0]


def _mha_writes(src: list[int], n_dst: int, start: int) -> list[tuple[int, int, int]]:
    """``_send_kvcache_generic`` on a non-MLA backend (no layer ids): entries split into K
    and V halves by ``CommonKVManager.get_mha_kv_ptrs_with_pp`` with the stage's start
    layer; K entry ``l`` and V entry ``l`` both move ``item_lens[l]`` (the K entry's
    length). Returns (prefill entry, decode entry, bytes); raises ``_Raised`` as the
    runtime does (an index past the decode's entries: IndexError; a stage without
    entries against a decode with some: ZeroDivisionError)."""
    n, dst_layers = len(src) // 2, n_dst // 2
    end = start + n
    dst = list(range(n_dst))
    if n == dst_layers:
        k, v = dst[:dst_layers], dst[dst_layers:]
    elif n < dst_layers and (n == 0 or dst_layers % n != 0):
        if n == 0:
            raise _Raised("ZeroDivisionError", _zero_division_text())
        offset = n * (dst_layers // n)
        k, v = dst[start:end], dst[offset + start : offset + end]
    else:
        k, v = dst[start:end], dst[dst_layers + start : dst_layers + end]
    writes = []
    for half, base in ((k, 0), (v, n)):
        for i in range(n):
            if i >= len(half):
                raise _index_error(i, len(half))
            writes.append((base + i, half[i], src[i]))
    return writes


def _flat_writes(src: list[int], dst_lens: list[int] | None, n_dst: int, start: int) -> list[tuple[int, int, int]]:
    """``_send_kvcache_generic`` on the flat layout (an MLA backend, or ``force_flat``:
    DSA index-K) without layer ids: ``get_mla_kv_ptrs_with_pp`` pairs entry ``l`` with the
    decode's ``start + l`` (identity when the counts agree); an entry either side elided
    (0 bytes; ``dst_lens`` only where the runtime passes them) moves nothing."""
    n = len(src)
    dst = list(range(n_dst))
    idx = dst if n == n_dst else dst[start : start + n]
    mapped = None
    if dst_lens is not None:
        mapped = dst_lens if n == n_dst else dst_lens[start : start + n]
    writes = []
    for i in range(n):
        if src[i] == 0 or (mapped is not None and i < len(mapped) and mapped[i] == 0):
            continue
        if i >= len(idx):
            raise _index_error(i, len(idx))
        writes.append((i, idx[i], src[i]))
    return writes


def decide_pp_component(dec: StateDecision, p: SideGeometry, d: SideGeometry, pp_rank: int) -> None:
    """A whole-slot component (equal TP, or an MLA backend) of prefill PP stage
    ``pp_rank``, as ``maybe_send_extra`` sends it from a PP>1 prefill (0.5.22/0.5.23): no
    prepared plan (``_prepared_state_component_indices`` needs PP 1), so the generic
    senders: Mamba by layer id (``_send_mamba_state``), the KV-shaped components (swa,
    block scales) split into K/V halves from the pool's start layer
    (``get_mha_kv_ptrs_with_pp``; an SWA pool starts every stage at 0), DSA index-K (and
    KV-shaped state on an MLA backend) on the flat layout (``get_mla_kv_ptrs_with_pp``).
    Every write is read back: one that lands in a decode entry of another layer or part
    (K/V, conv/temporal), or that moves other than the decode entry's item length, is
    certain silent corruption; what the runtime raises is the decision's error."""
    t = dec.state_type
    src, dst = _lens(p, t), _lens(d, t)
    src_regs = [r for r in p.state_regions if r.state_type == t]
    dst_regs = [r for r in d.state_regions if r.state_type == t]
    start = transfer_start_layer(p, pp_rank)
    try:
        if t == "mamba":
            if not src:
                dec.unchecked = _EMPTY_STAGE.format(rank=pp_rank, t=t)
                return
            pairs = entry_pairs(_ids(p, t), _ids(d, t), len(src), len(dst), positional=False)
            writes = [(s, j, src[s]) for s, j in pairs if src[s]]
        elif t in _KV_SHAPED and not p.is_mla:
            writes = _mha_writes(src, len(dst), start)
        else:
            writes = _flat_writes(src, dst if t != "dsa" else None, len(dst), start)
    except _Raised as exc:
        dec.error = _err(exc.message, exc.type)
        return
    for s, j, n_bytes in writes:
        a, b = src_regs[s], dst_regs[j]
        if (a.layer_id, a.part) != (b.layer_id, b.part):
            dec.corruption = (
                f"prefill PP stage {pp_rank}: {t} entry {s} (layer {a.layer_id} {a.part}) is written into decode "
                f"entry {j} "
                f"(layer {b.layer_id} {b.part}): the generic path pairs this stage's entries from start layer {start}"
                + (" (an SWA pool starts every PP stage at 0; its state carries no layer ids)" if p.pool == SWA else "")
            )
            return
        if dst[j] and n_bytes != dst[j]:
            dec.corruption = (
                f"prefill PP stage {pp_rank}: {t} entry {s} moves {n_bytes} bytes per item into decode entry {j} of "
                f"{dst[j]} bytes "
                "(the generic path writes each item with the prefill's length at the prefill's stride)"
            )
            return
    dec.path = "whole_generic"


def merge_stages(per_stage: list[list[StateDecision]]) -> list[StateDecision]:
    """One decision per component from the decisions of every prefill PP stage (each
    stage's transfer worker sends its own entries, and each fails or corrupts on its
    own): per component the first stage that raises, else the first that corrupts, else
    the first left undecided, else stage 0's. A later stage's error names the stage in
    ``raised_by``."""
    out: list[StateDecision] = []
    for i, first in enumerate(per_stage[0]):
        # A stage's component list can be shorter (a MiniMax stage without sparse layers):
        # only the same component of each stage is merged.
        column = [stage[i] for stage in per_stage if i < len(stage) and stage[i].state_type == first.state_type]
        pick = (
            next((d for d in column if d.error is not None), None)
            or next((d for d in column if d.corruption), None)
            or next((d for d in column if d.unchecked), None)
            or first
        )
        pick = pick.model_copy(deep=True)
        if pick.error is not None and pick.pp_rank > 0 and "PP stage" not in pick.error.raised_by:
            pick.error.raised_by += f" on prefill PP stage {pick.pp_rank}"
        out.append(pick)
    return out


def unpaired_pp(prefill_pp: int, decode_pp: int) -> str | None:
    """Why kvcheck leaves the state components of this PP pairing undecided (None when
    it decides them): a decode at PP > 1 receives from a prefill at PP 1 or at a PP size
    other than its own."""
    if decode_pp > 1 and decode_pp != prefill_pp:
        return (
            f"a decode at PP {decode_pp} with a prefill at PP {prefill_pp}: the decode refuses the pair at bootstrap "
            f"('Decode pp size ({decode_pp}) should be equal to prefill pp size ({prefill_pp}) or 1'); no state moves"
        )
    return None
