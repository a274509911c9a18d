"""DeepSeek V4 on Mooncake, SGLang 0.5.12 .. 0.5.13.post1: the release's own code on CPU,
in its own process.

``PYTHONPATH=<release dir>:<deps dir>:<repo>:<repo>/tests/stubs python tests/mooncake_dsv4_legacy_worker.py CASES.json``
prints one JSON object: the imported release and, per case, what the release registers and
writes. A case is ``{"prefill": {...}, "decode": {...}, "config": {...}}``; each side's
``{"speculative": bool, "fp4_indexer": bool, "online_c128": bool}``; ``config`` a model
config of DeepSeek V4's shape (``compress_ratios``, head dims).

For each side, the release's ``DeepSeekV4TokenToKVPool`` is built with ``device="cpu"``
as ``ModelRunner._init_pools`` builds it (fp8 KV, fp32 compress states, page 256, the
ring sizes of ``get_compress_state_ring_size`` under the side's speculative flag), and
``setup_state_kv_args`` (with the NextN draft pool when the side speculates: compress
ratio 0 on every layer) gives the state components; ``get_contiguous_buf_infos`` the KV
regions. Then a prefill ``MooncakeKVManager`` made with ``object.__new__`` (a recording
stand-in for the transfer engine, nothing else stubbed on the path) runs the release's own
``maybe_send_extra`` for one state page (prefill index 1 to decode index 2) against the
decode's registration, in the address space of ``kvcheck.sglang.mooncake.states``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import sys
import threading
import types


def _pool(m, torch, cfg: dict, side: dict, *, draft: bool = False):
    layers = 1 if draft else cfg["num_hidden_layers"]
    ratios = [0] * layers if draft else list(cfg["compress_ratios"])
    kw = dict(
        max_num_reqs=4,
        swa_size=4 * 256,
        c4_size=4 * 64,
        c128_size=8,
        c4_state_pool_size=64,
        c128_state_pool_size=64,
        page_size=256,
        swa_page_size=256,
        dtype=torch.float8_e4m3fn,
        state_dtype=torch.float32,
        qk_nope_head_dim=cfg["head_dim"] - cfg["qk_rope_head_dim"],
        qk_rope_head_dim=cfg["qk_rope_head_dim"],
        indexer_head_dim=cfg["index_head_dim"],
        layer_num=layers,
        device="cpu",
        enable_memory_saver=False,
        compression_ratios=ratios,
        start_layer=0,
        end_layer=layers,
    )
    return m.DeepSeekV4TokenToKVPool(**kw)


def registered(cfg: dict, side: dict) -> dict:
    """What one side registers: KV item lengths, state types and state item lengths."""
    import torch

    import sglang.srt.mem_cache.deepseek_v4_memory_pool as m
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import setup_state_kv_args

    args = types.SimpleNamespace(
        speculative_algorithm="EAGLE" if side.get("speculative") else None,
        enable_deepseek_v4_fp4_indexer=bool(side.get("fp4_indexer")),
    )
    m.get_global_server_args = lambda: args
    for mod in list(sys.modules.values()):  # the indexer pool reads the flag in its own module
        if getattr(mod, "__name__", "").startswith("sglang.srt.mem_cache") and hasattr(mod, "get_global_server_args"):
            mod.get_global_server_args = lambda: args
    m.ONLINE_C128 = bool(side.get("online_c128"))
    pool = _pool(m, torch, cfg, side)
    draft = _pool(m, torch, cfg, side, draft=True) if side.get("speculative") else None
    _, _, kv = pool.get_contiguous_buf_infos()
    kv = list(kv)
    if draft is not None:  # DecodePreallocQueue / PrefillBootstrapQueue._init_kv_manager append the draft's
        kv += list(draft.get_contiguous_buf_infos()[2])
    a = KVArgs()
    setup_state_kv_args(a, pool, draft, cfg["num_hidden_layers"])
    return {
        "kv": kv,
        "types": [t.value for t in a.state_types],
        "state_items": [list(x) for x in a.state_item_lens],
    }


class _Engine:
    def __init__(self):
        self.writes: list[tuple[int, int, int]] = []
        self.lock = threading.Lock()

    def batch_transfer_sync(self, session, srcs, dsts, lens):
        with self.lock:
            self.writes += [(int(s), int(d), int(n)) for s, d, n in zip(srcs, dsts, lens, strict=False)]
        return 0


def state_writes(p: dict, d: dict) -> dict:
    """The release's own ``maybe_send_extra`` for one state page: its writes, or the text it raised."""
    from kvcheck.sglang.mooncake import common as mb
    from kvcheck.sglang.mooncake import states as ms
    from sglang.srt.disaggregation.base.conn import KVArgs, StateType
    from sglang.srt.disaggregation.mooncake import conn

    mgr = object.__new__(conn.MooncakeKVManager)
    a = KVArgs()
    a.state_types = [StateType(t) for t in p["types"]]
    a.state_data_ptrs = [[ms.SRC_STATE_BASE + i * mb.STRIDE for i in range(len(x))] for x in p["state_items"]]
    a.state_item_lens = p["state_items"]
    a.state_data_lens = [[n * 8 for n in x] for x in p["state_items"]]
    a.state_dim_per_tensor = [[] for _ in p["state_items"]]
    a.prefill_start_layer, a.mla_compression_ratios = 0, None
    mgr.kv_args = a
    mgr.engine = _Engine()
    mgr.is_mla_backend = True  # is_mla_backend(DeepSeekV4TokenToKVPool): disaggregation/utils.py
    mgr.attn_tp_size, mgr.pp_size = 1, 1
    mgr.enable_custom_mem_pool = False
    names = {f.name for f in dataclasses.fields(conn.KVArgsRegisterInfo)}
    values = dict(
        room="None",
        endpoint=mb.DECODE_ENDPOINT[0],
        dst_port=mb.DECODE_ENDPOINT[1],
        mooncake_session_id=mb.SESSION,
        dst_kv_ptrs=[],
        dst_aux_ptrs=[],
        dst_state_data_ptrs=[[ms.DST_STATE_BASE + i * mb.STRIDE for i in range(len(x))] for x in d["state_items"]],
        dst_tp_rank=0,
        dst_attn_tp_size=1,
        dst_kv_item_len=0,
        dst_state_item_lens=d["state_items"],
        dst_state_dim_per_tensor=[[] for _ in d["state_items"]],
    )
    info = conn.KVArgsRegisterInfo(**{k: v for k, v in values.items() if k in names})
    tnames = {f.name for f in dataclasses.fields(conn.TransferInfo)}
    tvals = dict(
        room=mb.ROOM,
        endpoint=mb.DECODE_ENDPOINT[0],
        dst_port=mb.DECODE_ENDPOINT[1],
        mooncake_session_id=mb.SESSION,
        dst_kv_indices=[],
        dst_aux_index=0,
        dst_state_indices=[[mb.DST_PAGE] for _ in d["types"]],
        required_dst_info_num=1,
        is_dummy=False,
    )
    req = conn.TransferInfo(**{k: v for k, v in tvals.items() if k in tnames})
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            rc = mgr.maybe_send_extra(req, [[mb.SRC_PAGE] for _ in p["types"]], ex, info)
    except RuntimeError as exc:
        return {"writes": [], "error": str(exc), "rc": None}
    return {"writes": sorted(mgr.engine.writes), "error": None, "rc": rc}


def main() -> int:
    from kvcheck.sglang.runtime_kernel import _tolerate_reregistered_configs

    _tolerate_reregistered_configs()
    import logging

    import sglang

    logging.disable(logging.WARNING)
    cases = json.loads(open(sys.argv[1]).read())
    out = {"imported": sglang.__version__, "cases": []}
    for case in cases:
        p = registered(case["config"], case["prefill"])
        d = registered(case["config"], case["decode"])
        out["cases"].append({"prefill": p, "decode": d, "send": state_writes(p, d)})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
