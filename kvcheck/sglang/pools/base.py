"""Pool names and what every pool builder reads and returns.

A side's KV pool is one of ``POOLS`` (``SideGeometry.pool``). Each pool that the target
model can build has a builder in its own module (``kvcheck.sglang.pools.token``,
``swa``, ``minimax``, ``linear``; DeepSeek V4: ``kvcheck.sglang.dsv4``) that returns the
regions ``get_contiguous_buf_infos`` registers and the state components
``setup_state_kv_args`` adds, as SGLang 0.5.23's pool class builds them.
``kvcheck.sglang.geometry.derive_geometry`` resolves the inputs once, picks the builder
(``kvcheck.sglang.pools.builder_for``) and appends the draft pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from kvcheck.sglang.model import ModelConfig
    from kvcheck.sides import Side

PoolName = Literal["MHA", "MLA", "DSA", "SWA", "HYBRID_LINEAR", "MINIMAX_SPARSE", "DSV4", "not_modeled"]

MHA: Final = "MHA"  # MHATokenToKVPool
MLA: Final = "MLA"  # MLATokenToKVPool
DSA: Final = "DSA"  # DSATokenToKVPool (DeepSeek V3.2 / GLM-5: MLA + index-K state)
SWA: Final = "SWA"  # SWAKVPool (full-attention layers as KV, sliding-window layers as the "swa" state)
HYBRID_LINEAR: Final = "HYBRID_LINEAR"  # HybridLinearKVPool (full-attention KV + Mamba state)
MINIMAX_SPARSE: Final = "MINIMAX_SPARSE"  # MiniMax sparse pool (K-only sparse layers)
DSV4: Final = "DSV4"  # DeepSeekV4TokenToKVPool (kvcheck.sglang.dsv4)
NOT_MODELED: Final = "not_modeled"  # a pool kvcheck does not model (the pair is unchecked)

POOLS: Final[tuple[PoolName, ...]] = (MHA, MLA, DSA, SWA, HYBRID_LINEAR, MINIMAX_SPARSE, DSV4, NOT_MODELED)


@dataclass
class PoolInputs:
    """What derive_geometry resolved for one rank of one side, read by every builder.

    ``layers``: [start, end) model layers of this PP stage; ``kind``: the memory kind of
    the target regions (DRAM for a HiSparse decode's host pool); ``heads``: KV heads per
    attention-TP rank (0 for MLA); ``notes``: the side's notes, builders append to it."""

    side: Side
    model: ModelConfig
    page_size: int
    dtype: str
    nbytes: int
    fp4: bool
    mxfp8: bool
    kind: str
    layers: tuple[int, int]
    heads: int
    dsa_layout: str
    attention_backend: str | None
    gpu: Any
    notes: list[str]

    def in_stage(self, ids: list[int]) -> list[int]:
        """The layer ids of ``ids`` that this PP stage holds."""
        start, end = self.layers
        return [i for i in ids if start <= i < end]


@dataclass
class PoolLayout:
    """A builder's answer: the pool, its KV regions (dicts of ``Region`` fields, no index)
    and state buffers (``StateRegion`` fields), the component names in registration order
    and the FP4 block-scale buffers left unregistered. ``not_modeled_reason``: the pool
    the model builds with these args is not modeled (the regions are then empty)."""

    pool: PoolName
    regions: list[dict] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    state_types: list[str] = field(default_factory=list)
    n_scales: int = 0
    not_modeled_reason: str | None = None


PoolBuilder = Callable[[PoolInputs], PoolLayout]
