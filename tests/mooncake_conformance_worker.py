"""One SGLang release's Mooncake conformance run, in its own process.

``PYTHONPATH=<release dir>:<deps dir>:<repo>:<repo>/tests/stubs python tests/mooncake_conformance_worker.py --release X --pairs N --seed S``
prints one JSON object: pairs compared, outcomes, seconds and every disagreement.

For each seeded prefill/decode geometry pair (MHA/GQA and MLA, equal and unequal
attention TP, PP prefill stages into PP 1 or the same PP decodes, uneven stage splits,
decode-only drafts, hybrid pools publishing layer ids, decode item lengths that differ),
and for each (prefill rank, decode rank) pair that exchanges KV, the release's own
``MooncakeKVManager.transfer_worker`` (``kvcheck.sglang.mooncake_runtime``) and
``kvcheck.sglang.mooncake.simulate_writes`` must give the same writes (source address,
destination address, length), the same failure reason / worker error text; and the
verdict ``misplaced_write`` reads from the runtime's writes must equal the builtin
decision's (``mooncake.decide``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time


def _side(role, *, mla, tp, pp, stages, stage, page, item, n_draft=0, pool=None, v_item=None):
    from kvcheck.sglang.geometry import Region, SideGeometry

    lo, hi = stages[stage]
    layers = list(range(lo, hi))
    total = stages[-1][1]
    draft = list(range(total, total + n_draft))
    regs = []

    def add(lids, part, it, poolname):
        for lid in lids:
            regs.append(Region(index=len(regs), kind="VRAM", item_len=it, layer_id=lid, part=part, pool=poolname))

    if mla:
        add(layers, "KV", item, "target")
        add(draft, "KV", item, "draft")
    else:
        add(layers, "K", item, "target")
        add(layers, "V", v_item or item, "target")
        add(draft, "K", item, "draft")
        add(draft, "V", v_item or item, "draft")
    return SideGeometry(role=role, pool=pool or ("MLA" if mla else "MHA"), is_mla=mla, attn_tp_size=tp, pp_size=pp, page_size=page,
                        page_size_pinned=True, kv_cache_dtype="auto", bytes_per_element=2, regions=regs, num_draft_regions=n_draft * (1 if mla else 2),
                        stage_layers=stages)


def _stages(rng, layers, pp):
    if pp == 1:
        return [(0, layers)]
    cuts = sorted(rng.sample(range(1, layers), pp - 1)) if rng.random() < 0.3 else [layers * k // pp for k in range(1, pp)]
    b = [0] + cuts + [layers]
    return [(b[k], b[k + 1]) for k in range(pp)]


def random_pair(rng: random.Random):
    """(prefill stage geometry, decode geometry, pp_rank, total KV heads, publish ids)."""
    mla = rng.random() < 0.3
    layers = rng.choice([2, 3, 4, 5, 6, 8])
    heads = 1 if mla else rng.choice([1, 2, 4, 8, 16])
    head_dim = rng.choice([16, 32])
    page = rng.choice([1, 2, 4])
    p_tp, d_tp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8])
    if rng.random() < 0.4:
        d_tp = p_tp
    p_pp = rng.choice([1, 1, 2, 3])
    p_pp = min(p_pp, layers)
    d_pp = rng.choice([1, p_pp])
    p_stages, d_stages = _stages(rng, layers, p_pp), (_stages(rng, layers, d_pp) if d_pp > 1 else [(0, layers)])
    if d_pp == p_pp and rng.random() < 0.7:
        d_stages = p_stages
    pp_rank = rng.randrange(p_pp)
    d_stage = pp_rank if d_pp == p_pp else 0

    def item(tp):
        return page * (head_dim * 2 if mla else max(1, heads // tp) * head_dim) * 2

    d_item = item(d_tp)
    if rng.random() < 0.15:
        d_item = d_item * rng.choice([2]) if rng.random() < 0.5 else max(2, d_item // 2)
    p_draft = rng.choice([0, 0, 0, 1])
    d_draft = p_draft if rng.random() < 0.7 else rng.choice([0, 1, 2])
    hybrid = not mla and rng.random() < 0.25
    pool = "HYBRID_LINEAR" if hybrid else None
    prefill = _side("prefill", mla=mla, tp=p_tp, pp=p_pp, stages=p_stages, stage=pp_rank, page=page, item=item(p_tp), n_draft=p_draft, pool=pool)
    decode = _side("decode", mla=mla, tp=d_tp, pp=d_pp, stages=d_stages, stage=d_stage, page=page, item=d_item, n_draft=d_draft, pool=pool)
    return prefill, decode, pp_rank, (heads if not mla else None)


def compare_pair(rk, mc, b, prefill, decode, pp_rank, heads, out) -> None:
    plan = mc.decide(prefill, decode, pp_rank=pp_rank, total_kv_heads=heads, release=b.version)
    key = plan.path or (plan.error.type + ":" + plan.error.message.split(" is written")[0].split(" (item")[0][:40].rstrip("0123456789) ") )
    out["outcomes"][key] = out["outcomes"].get(key, 0) + 1
    if plan.path == "not_modeled":
        out["not_modeled"] += 1
        return
    ids = (mc.publishes_layer_ids(prefill, b), mc.publishes_layer_ids(decode, b))
    flat = prefill.is_mla or prefill.attn_tp_size == decode.attn_tp_size
    runtime_verdict = None
    for s, d in mc.rank_pairs(prefill.attn_tp_size, decode.attn_tp_size, heads) if not flat else [(0, 0)]:
        got = rk.run_request(prefill, decode, pp_rank=pp_rank, total_kv_heads=heads, src_rank=s, dst_rank=d, publish_ids=ids)
        try:
            w = mc.simulate_writes(prefill, decode, pp_rank=pp_rank, total_kv_heads=heads, src_rank=s, dst_rank=d, b=b)
            mine = {"writes": sorted(w.writes), "failure": None, "worker_error": None}
        except mc.SendFailed:
            mine = {"writes": [], "failure": f"Failed to send kv chunk of {mc.ROOM} to {mc.DECODE_ENDPOINT[0]}:{mc.DECODE_ENDPOINT[1]}", "worker_error": None}
            w = None
        except Exception as exc:
            mine = {"writes": [], "failure": None, "worker_error": f"Transfer thread failed because of {exc}. Prefill instance with bootstrap_port=8998 is dead."}
            w = None
        if got["worker_error"] or got["failure"]:
            # the verdict is the text; writes issued before a worker dies (0.5.17's
            # per-layer slice loop) change nothing the operator sees
            got = {**got, "writes": []}
        if got != mine:
            out["disagreements"].append({"part": "writes", "ranks": [s, d], "prefill": prefill.model_dump(include={"is_mla", "attn_tp_size", "pp_size", "stage_layers", "page_size", "num_draft_regions", "pool"}),
                                         "decode": decode.model_dump(include={"is_mla", "attn_tp_size", "pp_size", "num_draft_regions"}), "pp_rank": pp_rank,
                                         "runtime": {k: (v[:3] if k == "writes" else v) for k, v in got.items()}, "builtin": {k: (v[:3] if k == "writes" else v) for k, v in mine.items()}})
            out["n_disagreements"] += 1
            return
        if runtime_verdict is None:
            if got["worker_error"]:
                runtime_verdict = ("RuntimeError", got["worker_error"])
            elif got["failure"]:
                runtime_verdict = ("KVTransferError", got["failure"])
            else:
                rw = mc.Writes(path=w.path, fn=w.fn, writes=got["writes"])
                bad = mc.misplaced_write(prefill, decode, rw, total_kv_heads=heads, src_rank=s, dst_rank=d)
                if bad:
                    runtime_verdict = ("SilentCorruption", bad)
        out["rank_pairs"] += 1
    mine_verdict = (plan.error.type, plan.error.message) if plan.error else None
    if runtime_verdict != mine_verdict:
        out["disagreements"].append({"part": "verdict", "runtime": runtime_verdict, "builtin": mine_verdict})
        out["n_disagreements"] += 1
    out["pairs"] += 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", required=True)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    from kvcheck.sglang import mooncake as mc
    from kvcheck.sglang import mooncake_runtime as rk

    out = {"release": a.release, "imported": rk.runtime_version(), "pairs": 0, "rank_pairs": 0, "not_modeled": 0, "outcomes": {},
           "disagreements": [], "n_disagreements": 0}
    out["import_seconds"] = round(time.perf_counter() - t0, 2)
    b = mc.behaviour(a.release)
    rng = random.Random(a.seed)
    for _ in range(a.pairs):
        prefill, decode, pp_rank, heads = random_pair(rng)
        compare_pair(rk, mc, b, prefill, decode, pp_rank, heads, out)
    out["disagreements"] = out["disagreements"][:15]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
