"""Which prefill node moves KV to which decode node: SGLang's own rank mapping, per node.

Restated from SGLang 0.5.23 (never copied):

- Ranks on a node (``DataParallelController.launch_tensor_parallel_group`` in
  ``managers/data_parallel_controller.py`` and ``_calculate_rank_ranges`` in
  ``entrypoints/engine.py``): ``pp_per_node = max(pp // nnodes, 1)``,
  ``nnodes_per_pp_rank = max(nnodes // pp, 1)``; node ``k`` runs PP ranks
  ``[pp_per_node * (k // nnodes_per_pp_rank), +pp_per_node)`` and TP ranks
  ``[tp_per_node * (k % nnodes_per_pp_rank), +tp_per_node)`` with
  ``tp_per_node = tp // nnodes_per_pp_rank``.
- Attention ranks (``derive_attention_ranks`` / ``derive_attn_tp_size`` in
  ``runtime_context.py``): the TP group is laid out (dp, cp, tp), tp fastest:
  ``attn_tp = tp // dp // cp``, ``attn_tp_rank = tp_rank % attn_tp``,
  ``attn_dp_rank = tp_rank // (attn_tp * cp)``, so ``attn_cp_rank = (tp_rank // attn_tp) % cp``.
  In 0.5.23 ``--dp-size`` always means attention DP (``--enable-dp-attention`` is deprecated).
- The decode's choice of prefill ranks (``CommonKVManager._resolve_rank_mapping`` in
  ``disaggregation/common/conn.py``; the decode's ``engine_rank`` is
  ``tp_rank % attn_tp``, ``disaggregation/decode.py``): equal attention TP -> the same
  attention TP rank; decode wider -> ``rank // (decode_attn_tp // prefill_attn_tp)``;
  decode narrower -> the ``prefill_attn_tp // decode_attn_tp`` ranks
  ``[rank * r, (rank + 1) * r)`` (MLA reads KV from the first only, but keeps a
  connection to all and sends them dummy requests: kvcheck probes them all); MLA with
  ``--enable-kv-cache-sharding`` -> every prefill TP rank. CP: the decode runs CP 1 and
  reads prefill CP rank 0, or every CP rank when the prefill shards KV across CP (a
  condition of several flags and environment variables: kvcheck takes every CP rank, a
  superset, never fewer pairs). PP: equal PP -> the same PP rank, decode PP 1 -> every
  prefill PP rank.
- DP: the prefill DP rank is picked per request (the router's ``bootstrap_room`` or
  ``data_parallel_rank``): any decode rank may read from any prefill DP rank. And the
  router pairs any prefill instance with any decode instance.

A node pair must move KV when some decode rank on the decode node reads from some
prefill rank on the prefill node.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parallel:
    """One instance's parallel layout: ``tp``/``dp``/``cp``/``pp`` sizes (attention DP and
    CP), ``nnodes`` nodes per instance, ``mla`` (MLA or hybrid-MLA KV), ``kv_sharding``
    (``--enable-kv-cache-sharding``)."""

    tp: int = 1
    dp: int = 1
    cp: int = 1
    pp: int = 1
    nnodes: int = 1
    mla: bool = False
    kv_sharding: bool = False

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // max(self.dp, 1) // max(self.cp, 1))

    def ranks_on_node(self, node_rank: int) -> list[tuple[int, int]]:
        """``(pp_rank, tp_rank)`` of every scheduler process node ``node_rank`` runs."""
        pp_per_node = max(self.pp // self.nnodes, 1)
        nodes_per_pp = max(self.nnodes // self.pp, 1)
        tp_per_node = max(self.tp // nodes_per_pp, 1)
        pps = range(pp_per_node * (node_rank // nodes_per_pp), pp_per_node * (node_rank // nodes_per_pp + 1))
        tps = range(tp_per_node * (node_rank % nodes_per_pp), tp_per_node * (node_rank % nodes_per_pp + 1))
        return [(p, t) for p in pps for t in tps]

    def attention_ranks(self, tp_rank: int) -> tuple[int, int, int]:
        """``(attn_tp_rank, attn_cp_rank, attn_dp_rank)`` of ``tp_rank``."""
        a = self.attn_tp
        return tp_rank % a, (tp_rank // a) % max(self.cp, 1), tp_rank // (a * max(self.cp, 1))


def decode_reads(
    prefill: Parallel, decode: Parallel, decode_tp_rank: int, decode_pp_rank: int
) -> tuple[list[int], list[int], list[int]]:
    """The prefill ``(attn TP ranks, CP ranks, PP ranks)`` the decode rank reads from (any DP rank)."""
    d_rank = decode_tp_rank % decode.attn_tp  # the decode's engine_rank
    pa, da = prefill.attn_tp, decode.attn_tp
    if prefill.mla and prefill.kv_sharding and prefill.cp == 1:
        tps = list(range(pa))
    elif da == pa:
        tps = [d_rank]
    elif da > pa:
        tps = [d_rank // (da // pa)]
    else:
        r = pa // da
        tps = list(range(d_rank * r, (d_rank + 1) * r))
    cps = list(range(max(prefill.cp, 1)))
    pps = [decode_pp_rank] if prefill.pp == decode.pp else list(range(prefill.pp))
    return tps, cps, pps


def node_pairs(prefill: Parallel, decode: Parallel) -> set[tuple[int, int]]:
    """``(prefill node rank, decode node rank)`` pairs within one prefill instance and one
    decode instance that move KV (see the module docstring)."""
    owner: dict[tuple[int, int, int], set[int]] = {}  # (attn tp, cp, pp) -> prefill node ranks
    for node in range(prefill.nnodes):
        for pp, tp in prefill.ranks_on_node(node):
            a, c, _dp = prefill.attention_ranks(tp)
            owner.setdefault((a, c, pp), set()).add(node)
    pairs: set[tuple[int, int]] = set()
    for dnode in range(decode.nnodes):
        for pp, tp in decode.ranks_on_node(dnode):
            tps, cps, pps = decode_reads(prefill, decode, tp, pp)
            for a in tps:
                for c in cps:
                    for p in pps:
                        for pnode in owner.get((a, c, p), ()):
                            pairs.add((pnode, dnode))
    return pairs


def parallel_of(args: dict, nnodes: int, mla: bool) -> Parallel:
    """``Parallel`` from parsed server args (dest -> value, ``kvcheck.sglang.flags``)."""

    def num(key, default=1):
        v = args.get(key)
        try:
            return max(int(v), 1) if v is not None else default
        except (TypeError, ValueError):
            return default

    return Parallel(
        tp=num("tp_size"),
        dp=num("dp_size"),
        cp=num("attn_cp_size"),
        pp=num("pp_size"),
        nnodes=max(num("nnodes"), nnodes, 1),
        mla=mla,
        kv_sharding=bool(args.get("enable_kv_cache_sharding")),
    )
