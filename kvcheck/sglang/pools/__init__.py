"""KV pools, one module each (``token``: MHA/MLA/DSA, ``swa``, ``minimax``, ``linear``;
DeepSeek V4: ``kvcheck.sglang.dsv4``), the pool names (``base``) and which pool a model
builds (``pool_of``). Adding a pool: see CONTRIBUTING.md ("add a KV pool")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcheck.sglang.pools import linear, minimax, swa, token
from kvcheck.sglang.pools.base import (
    DSA,
    DSV4,
    HYBRID_LINEAR,
    MHA,
    MINIMAX_SPARSE,
    MLA,
    NOT_MODELED,
    POOLS,
    SWA,
    PoolBuilder,
    PoolInputs,
    PoolLayout,
    PoolName,
)

if TYPE_CHECKING:
    from kvcheck.sglang.model import ModelConfig

__all__ = [
    "BUILDERS",
    "DSA",
    "DSV4",
    "HYBRID_LINEAR",
    "MHA",
    "MINIMAX_SPARSE",
    "MLA",
    "NOT_MODELED",
    "POOLS",
    "SWA",
    "PoolBuilder",
    "PoolInputs",
    "PoolLayout",
    "PoolName",
    "builder_for",
    "pool_of",
]

# The builder of each pool derive_geometry builds from PoolInputs (DSV4 has its own
# geometry, kvcheck.sglang.dsv4.dsv4_geometry; not_modeled has none).
BUILDERS: dict[PoolName, PoolBuilder] = {
    MHA: token.build,
    MLA: token.build,
    DSA: token.build,
    SWA: swa.build,
    MINIMAX_SPARSE: minimax.build,
    HYBRID_LINEAR: linear.build,
}


def pool_of(model: ModelConfig) -> PoolName:
    """The pool SGLang 0.5.23 builds for ``model`` (before the args: FP4 KV, MiniMax
    index-value layers or HiSparse can still make it unmodeled)."""
    if model.attention == "not_modeled":
        return NOT_MODELED
    if model.dsv4:
        return DSV4
    if model.hybrid == "swa":
        return SWA
    if model.hybrid == "minimax_sparse":
        return MINIMAX_SPARSE
    if model.hybrid == "linear":
        return HYBRID_LINEAR
    if model.dsa:
        return DSA
    return MLA if model.is_mla else MHA


def builder_for(pool: PoolName) -> PoolBuilder:
    """The builder of ``pool`` (``KeyError`` for DSV4 and not_modeled, which have none)."""
    return BUILDERS[pool]
