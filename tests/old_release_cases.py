"""Named PD cases of one older SGLang release, run in its own process (one import path).

Run by ``tests/test_pd_old_releases.py`` as
``PYTHONPATH=<release dir>:<deps dir>:<repo>:<repo>/tests python tests/old_release_cases.py X``;
prints one JSON object: for each case, what the installed release's own code does
(``runtime_kernel``: ``add_transfer_request`` of 0.5.5 .. 0.5.11, ``CommonKVReceiver.__init__``
of 0.5.5 .. 0.5.9 or ``try_ensure_parallel_info`` from 0.5.10) and what kvcheck's builtin
restatement says with ``behaviour(X)``.
"""

from __future__ import annotations

import json
import sys

from conformance_pairs import side


def _plan(p):
    return {"path": p.path, "dst_indices": p.dst_indices, "write_lens": p.write_lens, "error": [p.error.type, p.error.message] if p.error else None}


def cases():
    """(name, prefill, decode, total_kv_heads): one-rank geometries of plain pools."""
    mla = dict(is_mla=True, pp=1, stages=[(0, 4)], page=64)
    mha = dict(is_mla=False, pp=1, stages=[(0, 4)], page=16)
    return [
        # a prefill-only MTP draft region: 5 MLA regions into 4 (get_mla_kv_ptrs_with_pp slices 4)
        ("mla_prefill_only_draft", side("prefill", tp=8, kinds=["VRAM"] * 5, items=[73728] * 5, n_draft=1, **mla),
         side("decode", tp=8, kinds=["VRAM"] * 4, items=[73728] * 4, **mla), None),
        # a decode-only draft (K, V) on MHA: 0.5.8's offset branch (3 decode layers per half, 2 on the prefill)
        ("mha_decode_only_draft", side("prefill", tp=2, kinds=["VRAM"] * 4, items=[4096] * 4, **mha),
         side("decode", tp=2, kinds=["VRAM"] * 6, items=[4096] * 6, n_draft=2, **mha), 8),
        # 8 KV heads, prefill TP 1 -> decode TP 16: kv_head_num * 1 // 16 == 0 heads per decode rank
        ("mha_decode_replicates_heads", side("prefill", tp=1, kinds=["VRAM"] * 4, items=[16 * 8 * 256] * 4, **mha),
         side("decode", tp=16, kinds=["VRAM"] * 4, items=[16 * 1 * 256] * 4, **mha), 8),
        # 8 KV heads, prefill TP 2 -> decode TP 4: 2 of the prefill's 4 heads per token
        ("mha_head_slices", side("prefill", tp=2, kinds=["VRAM"] * 4, items=[16 * 4 * 256] * 4, **mha),
         side("decode", tp=4, kinds=["VRAM"] * 4, items=[16 * 2 * 256] * 4, **mha), 8),
        # a longer decode item (float32 vs bfloat16): written at the prefill's stride
        ("mha_longer_decode_item", side("prefill", tp=2, kinds=["VRAM"] * 4, items=[4096] * 4, **mha),
         side("decode", tp=2, kinds=["VRAM"] * 4, items=[8192] * 4, **mha), 8),
        # a shorter decode item (bfloat16 vs float32): also written at the prefill's stride, unchecked
        ("mha_shorter_decode_item", side("prefill", tp=2, kinds=["VRAM"] * 4, items=[8192] * 4, **mha),
         side("decode", tp=2, kinds=["VRAM"] * 4, items=[4096] * 4, **mha), 8),
    ]


def main() -> int:
    release = sys.argv[1]
    from kvcheck.sglang import plan as builtin
    from kvcheck.sglang import runtime_kernel as rk
    from kvcheck.sglang.pd_release import behaviour
    from kvcheck.sglang.plan import PairInfo

    b = behaviour(release)
    out = {"imported": rk.runtime_version(), "transfer": {}, "bootstrap": {}}
    for name, p, d, heads in cases():
        out["transfer"][name] = {
            "runtime": _plan(rk.decide_transfer(p, d, total_kv_heads=heads)),
            "builtin": _plan(builtin.decide_transfer(p, d, total_kv_heads=heads, behaviour=b)),
        }
    base = dict(kv_cache_dtype_str="auto", attn_tp_size=2, attn_cp_size=1, pp_size=2)
    pairs = {
        "page_size": (PairInfo(page_size=16, **base), PairInfo(page_size=64, **base)),
        "pp_size": (PairInfo(page_size=16, **base), PairInfo(page_size=16, **{**base, "pp_size": 4})),
        "accepted": (PairInfo(page_size=16, **base), PairInfo(page_size=16, **{**base, "attn_tp_size": 4, "pp_size": 1})),
    }
    for name, (p, d) in pairs.items():
        rt, bi = rk.bootstrap_error(p, d), builtin.bootstrap_error(p, d, b)
        out["bootstrap"][name] = {"runtime": [rt.type, rt.message] if rt else None, "builtin": [bi.type, bi.message] if bi else None}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
