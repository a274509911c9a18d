"""The DSA index-K transfer of one installed SGLang release (0.5.5 .. 0.5.12.post1), driven
through that release's own NIXL code in its own process, against ``kvcheck.sglang.dsa_pd``.

Run by ``tests/test_pd_old_releases.py`` as
``PYTHONPATH=<release dir>:<deps dir>:<repo>:<repo>/tests python tests/dsa_state_worker.py X``;
prints one JSON object. For each case (a prefill and a decode "nsa" state component: per-layer
index-K entries with their bytes per page), a prefill ``NixlKVManager`` made with
``object.__new__`` (the stand-in agent of ``runtime_kernel`` records every descriptor list)
sends the last chunk of one request:

* 0.5.9 .. 0.5.12.post1: the release's own ``maybe_send_extra`` with the request's state
  page (``kv_args.state_type = "nsa"``; from 0.5.12 ``state_types = [StateType.NSA]`` and
  per-component lists), as ``add_transfer_request`` / ``transfer_worker`` call it;
* 0.5.5 .. 0.5.8: the release's own ``add_transfer_request`` (KV page, last chunk, aux), whose
  signature takes no state indices: the lists it builds are read for any state entry.

Recorded: which decode entry each prefill entry is written into, at which offset, with how
many bytes; the exception raised; and what ``dsa_pd.legacy_dsa_states`` decides for the pair.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys

STATE_BASE_SRC = 0x5F00_0000_0000
STATE_BASE_DST = 0x5E00_0000_0000
KV_ITEM = 36864  # a DSA latent page (576 fp8 bytes x 64 tokens); the KV lists are not read here
PAGE_SRC, PAGE_DST = 3, 5  # the request's state page on each side


def cases() -> list[tuple[str, list[int], list[int]]]:
    """(name, prefill entries' bytes per page, decode entries'): index-K of 4 layers at page
    size 64 (64 x (128 + 4) = 8448), a decode with a longer index item (page size 128), a decode
    with one more (draft) entry, a decode with fewer entries."""
    item = 64 * (128 + 128 // 128 * 4)
    return [
        ("equal", [item] * 4, [item] * 4),
        ("decode_longer_item", [item] * 4, [2 * item] * 4),
        ("decode_only_draft_entry", [item] * 4, [item] * 5),
        ("decode_fewer_entries", [item] * 4, [item] * 3),
    ]


def _peer(sg, n_dst_kv: int, dst_state: list[int], per_component: bool):
    cls = sg.nixl.KVArgsRegisterInfo
    names = {f.name for f in dataclasses.fields(cls)}
    ptrs = [STATE_BASE_DST + i * (1 << 32) for i in range(len(dst_state))]
    values = {
        "room": "None", "endpoint": "127.0.0.1", "dst_port": 0, "agent_name": "kvcheck-decode", "agent_metadata": b"",
        "dst_kv_ptrs": [0x7E00_0000_0000 + i * (1 << 32) for i in range(n_dst_kv)], "dst_aux_ptrs": [0x4E00_0000_0000],
        "dst_state_data_ptrs": [ptrs] if per_component else ptrs, "gpu_id": 0, "decode_tp_size": 1, "decode_tp_rank": 0,
        "dst_kv_item_len": KV_ITEM, "dst_state_item_lens": [dst_state] if per_component else dst_state,
        "dst_state_dim_per_tensor": [[]] if per_component else [],
    }
    return cls(**{k: v for k, v in values.items() if k in names})


def drive(sg, agent_cls, src_state: list[int], dst_state: list[int]) -> dict:
    import numpy as np

    mgr_cls = sg.nixl.NixlKVManager
    # 0.5.12 on: one list per state component (``List[List[int]]`` in maybe_send_extra's signature)
    per_component = hasattr(mgr_cls, "maybe_send_extra") and "List[List" in str(
        inspect.signature(mgr_cls.maybe_send_extra).parameters["prefill_state_indices"].annotation)
    kv_args = sg.KVArgs()
    n_kv = len(src_state)
    kv_args.kv_data_ptrs = [0x7F00_0000_0000 + i * (1 << 32) for i in range(n_kv)]
    kv_args.kv_item_lens = [KV_ITEM] * n_kv
    kv_args.kv_data_lens = [KV_ITEM * 8] * n_kv
    kv_args.aux_data_ptrs, kv_args.aux_data_lens, kv_args.aux_item_lens = [0x4F00_0000_0000], [4096], [64]
    src_ptrs = [STATE_BASE_SRC + i * (1 << 32) for i in range(len(src_state))]
    if per_component:
        kv_args.state_types = [sg.base_conn.StateType.NSA]
        kv_args.state_data_ptrs, kv_args.state_item_lens = [src_ptrs], [list(src_state)]
        kv_args.state_data_lens, kv_args.state_dim_per_tensor = [[x * 8 for x in src_state]], [[]]
    else:
        kv_args.state_type = "nsa"
        kv_args.state_data_ptrs, kv_args.state_item_lens = src_ptrs, list(src_state)
        kv_args.state_data_lens = [x * 8 for x in src_state]
    kv_args.gpu_id, kv_args.engine_rank, kv_args.pp_rank = 0, 0, 0
    kv_args.page_size, kv_args.prefill_start_layer = 64, 0
    kv_args.kv_head_num, kv_args.total_kv_head_num = 1, 1
    mgr = object.__new__(mgr_cls)
    mgr.kv_args = kv_args
    mgr.disaggregation_mode = sg.PREFILL
    mgr.is_mla_backend = True
    mgr.attn_tp_size, mgr.pp_size, mgr.pp_rank = 1, 1, 0
    mgr.agent = agent = agent_cls("kvcheck-prefill")
    mgr.decode_kv_args_table, mgr.transfer_infos, mgr.request_status, mgr.req_to_decode_prefix_len = {}, {}, {}, {}
    out: dict = {"path": None, "error": None, "writes": []}
    try:
        if hasattr(mgr_cls, "maybe_send_extra"):
            peer = _peer(sg, n_kv, dst_state, per_component)
            idx_src, idx_dst = ([[PAGE_SRC]], [[PAGE_DST]]) if per_component else ([PAGE_SRC], [PAGE_DST])
            takes = inspect.signature(mgr_cls.maybe_send_extra).parameters
            kw = {k: getattr(peer, k, None) for k in ("dst_state_item_lens", "dst_state_dim_per_tensor") if k in takes}
            mgr.maybe_send_extra(peer.agent_name, idx_src, peer.dst_state_data_ptrs, idx_dst, 0, "1_state_0", 1, **kw)
        else:
            assert "state_indices" not in inspect.signature(mgr_cls.add_transfer_request).parameters
            peer = _peer(sg, n_kv, dst_state, False)
            mgr._add_remote_peer(peer)
            ti_cls = sg.nixl.TransferInfo
            names = {f.name for f in dataclasses.fields(ti_cls)}
            ti = ti_cls(**{k: v for k, v in {
                "room": 1, "endpoint": "127.0.0.1", "dst_port": 0, "agent_name": peer.agent_name, "dst_kv_indices": np.array([PAGE_DST], dtype=np.int32),
                "dst_aux_index": 0, "required_dst_info_num": 1}.items() if k in names})
            mgr.transfer_infos[1] = {peer.agent_name: ti}
            mgr.add_transfer_request(1, np.array([PAGE_SRC], dtype=np.int32), slice(0, 1), True, 0, aux_index=0)
    except Exception as exc:  # noqa: BLE001  (the release's own exception, compared by the caller)
        out["error"] = [type(exc).__name__, str(exc)]
        return out
    for (src_rows, _), (dst_rows, _) in zip(agent.descs[0::2], agent.descs[1::2]):
        for (s_addr, s_len, _), (d_addr, _, _) in zip(src_rows, dst_rows):
            if STATE_BASE_SRC <= s_addr < STATE_BASE_SRC + (1 << 40):
                i, j = (s_addr - STATE_BASE_SRC) >> 32, (d_addr - STATE_BASE_DST) >> 32
                out["writes"].append([i, j, (d_addr - STATE_BASE_DST) & ((1 << 32) - 1), s_len])
    out["path"] = "sent" if out["writes"] else "not_sent"
    return out


def main() -> int:
    release = sys.argv[1]
    from kvcheck.sglang.runtime_kernel import driver as rk
    from kvcheck.sglang.runtime_kernel.per_request import _DescRecordingAgent
    from kvcheck.sglang.dsa_pd import legacy_dsa_states
    from kvcheck.sglang.geometry import SideGeometry, StateRegion
    from kvcheck.sglang.pd_release import behaviour

    sg = rk._sglang()
    b = behaviour(release)
    res = {"imported": sg.version, "cases": {}}
    for name, src, dst in cases():
        def geo(role, items):
            return SideGeometry(role=role, pool="DSA", is_mla=True, attn_tp_size=1, pp_size=1, page_size=64, page_size_pinned=True,
                                kv_cache_dtype="bfloat16", bytes_per_element=2, stage_layers=[(0, 4)], state_types=["dsa"],
                                state_regions=[StateRegion(index=i, state_type="dsa", item_len=x, layer_id=i, part="KV") for i, x in enumerate(items)])
        d = legacy_dsa_states(geo("prefill", src), geo("decode", dst), b, b)[0]
        res["cases"][name] = {"runtime": drive(sg, _DescRecordingAgent, src, dst),
                              "kvcheck": {"path": d.path, "corruption": d.corruption is not None, "unchecked": d.unchecked is not None}}
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
