"""One SGLang release's conformance run, in its own process (one import path per process).

Run by ``tests/test_conformance_releases.py`` as
``PYTHONPATH=<release dir>:<deps dir>:<repo>:<repo>/tests/stubs python tests/conformance_worker.py --release X --pairs N --seed S``;
prints one JSON object: the release imported, pairs compared per part, seconds, and every
disagreement (none expected).

Parts (each compared builtin vs the installed release's own code):
- ``bootstrap``: seeded decode bootstrap pairs; ``kvcheck.sglang.plan.bootstrap_error``
  with ``behaviour(X)`` against ``runtime_kernel.bootstrap_error`` (the release's
  ``try_ensure_parallel_info``; before 0.5.10 its ``CommonKVReceiver.__init__`` on the v1
  ``/route``): same exception class and text, or both accept.
- ``route``: the /route reply of every other known v2 release (the keys it sends, from
  ``pd_facts.json``) handed to this release's decode: the TypeError it logs, or none,
  against ``kvcheck.checks.pd_path.route_compat``'s prediction; and this release's own
  reply keys (``dataclasses.asdict`` of its ``PrefillServerInfo``) against the facts.
- ``registration``: a registration in each known frame layout parsed by this release's
  ``KVArgsRegisterInfo.from_zmq``: the exception it raises against the
  ``registration-frames`` prediction (where kvcheck predicts one).
- ``transfer``: seeded prefill/decode geometries through ``decide_transfer`` (releases
  whose decision the runtime kernel drives; 0.5.5 .. 0.5.11: one request through the
  release's ``add_transfer_request``, compared on path, decode region per source region,
  the bytes of each first descriptor, or the exception).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import sys
import time


def _pair_info(rng: random.Random, state_values: list[str], base=None):
    from kvcheck.sglang.plan import PairInfo

    def pick(field, values):
        if base is not None and rng.random() < 0.5:
            return getattr(base, field)
        return rng.choice(values)

    states = [v for v in ("block_scale", "minimax_index_k", "mamba", "swa") if v in state_values]
    return PairInfo(
        page_size=pick("page_size", [1, 16, 32, 64]),
        kv_cache_dtype_str=pick("kv_cache_dtype_str", ["auto", "bf16", "bfloat16", "fp8_e4m3"]),
        kv_cache_dtype_flag=pick("kv_cache_dtype_flag", ["auto", "bf16", "fp8_e4m3"]),
        attn_tp_size=pick("attn_tp_size", [1, 2, 4, 8]),
        attn_cp_size=pick("attn_cp_size", [1, 1, 1, 2]),
        pp_size=pick("pp_size", [1, 1, 2, 4]),
        dcp_size=pick("dcp_size", [1, 1, 1, 2]),
        is_mla=pick("is_mla", [False, True]),
        is_hybrid_mla=pick("is_hybrid_mla", [False, False, True]),
        enable_kv_cache_sharding=pick("enable_kv_cache_sharding", [False, False, True]),
        state_types=pick("state_types", [[], [], [rng.choice(states)] if states else []]),
        kv_layout=pick("kv_layout", [None, None, "paged", "unified"]),
        dsv41_spec_layout=pick("dsv41_spec_layout", [None, None, {"block_size": 16}, {"block_size": 32}]),
        hisparse=pick("hisparse", [False, False, True]),
    )


def _err(e):
    return None if e is None else [e.type, e.message]


def bootstrap_part(rk, b, n: int, rng: random.Random, out: dict) -> None:
    from kvcheck.sglang import plan as builtin

    state_values = [s.value for s in getattr(rk._sglang().base_conn, "StateType", [])]
    bad = []
    outcomes = out.setdefault("bootstrap_outcomes", {})
    for _ in range(n):
        p = _pair_info(rng, state_values)
        d = _pair_info(rng, state_values, base=p)
        if not state_values:
            d.state_types = []
        want = _err(rk.bootstrap_error(p, d))
        got = _err(builtin.bootstrap_error(p, d, b))
        k = want[1][:30] if want else "accepted"
        outcomes[k] = outcomes.get(k, 0) + 1
        if want != got:
            bad.append({"prefill": p.model_dump(), "decode": d.model_dump(), "runtime": want, "builtin": got})
    out["bootstrap"] = n
    out["disagreements"] += bad[:20]
    out["n_disagreements"] += len(bad)


def route_part(rk, b, out: dict) -> None:
    """Every known v2 release's /route reply into this release's decode."""
    from kvcheck.checks.base import REGISTRY
    from kvcheck.sglang.pd_release import behaviour, known_releases

    sg = rk._sglang()
    fields = [f.name for f in dataclasses.fields(sg.common.PrefillServerInfo)]
    if fields != list(b.route_accepts):
        out["disagreements"].append({"part": "route_fields", "runtime": fields, "facts": list(b.route_accepts)})
        out["n_disagreements"] += 1
    values = dict(attn_tp_size=1, attn_cp_size=1, dp_size=1, pp_size=1, page_size=16, kv_cache_dtype="auto", follow_bootstrap_room=True,
                  enable_dsa_cache_layer_split=False, enable_kv_cache_sharding=False, decode_allocation_policy="early")
    logger = logging.getLogger("sglang.srt.disaggregation.common.conn")
    n = 0
    for other in known_releases():
        bp = behaviour(other)
        if bp.route != "v2":
            continue
        payload = {k: values.get(k) for k in bp.route_sends if k not in bp.route_pops_when_none}
        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda rec: records.append(rec.getMessage())
        logger.addHandler(handler)
        old = logger.level
        logger.setLevel(logging.ERROR)
        try:
            from kvcheck.sglang.plan import PairInfo

            info = PairInfo(page_size=16, kv_cache_dtype_str="auto", attn_tp_size=1, attn_cp_size=1, pp_size=1)
            mgr = rk._decode_manager(sg, info)
            real = sg.common.requests
            sg.common.requests = type("R", (), {"get": staticmethod(lambda url, timeout=None: rk._RouteResponse(payload))})
            try:
                ok = mgr.try_ensure_parallel_info("kvcheck.invalid:1")
            finally:
                sg.common.requests = real
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old)
        runtime = None if ok else next((r.split("bootstrap: ", 1)[1] for r in records if "Error fetching prefill server info" in r), "?")
        ctx = type("Ctx", (), {})()
        ctx.extra = {"pd_behaviour": (bp, b), "pair_info": (info, info)}
        findings = REGISTRY["route-compat"].run(ctx) if bp.version != b.version else []
        predicted = findings[0].runtime_error.message if findings and findings[0].runtime_error else None
        n += 1
        if runtime != predicted:
            out["disagreements"].append({"part": "route", "prefill": other, "runtime": runtime, "builtin": predicted})
            out["n_disagreements"] += 1
    out["route"] = n


def _frames(b) -> list[bytes]:
    """A registration (after GUARD) in release ``b``'s layout: 2 KV regions, no state."""
    import struct

    head = [b"None", b"127.0.0.1", b"1234", b"kvcheck-decode", b"meta", struct.pack("QQ", 1 << 40, 2 << 40), b""]
    if b.gpu_id_frame == 8:
        head.append(b"")  # state pointers (0.5.9)
    head += [b"0", b"1", b"0", b"1024"]
    while len(head) < b.registration_sends:
        head.append(b"")
    return head


def registration_part(rk, b, out: dict) -> None:
    from kvcheck.checks.base import REGISTRY
    from kvcheck.sglang.pd_release import behaviour, known_releases
    from kvcheck.sglang.plan import PairInfo

    sg = rk._sglang()
    n = 0
    for other in known_releases():
        bd = behaviour(other)
        if bd.version == b.version or bd.gpu_id_frame == b.gpu_id_frame:
            continue
        try:
            sg.nixl.KVArgsRegisterInfo.from_zmq(_frames(bd))
            runtime = None
        except Exception as exc:
            runtime = [type(exc).__name__, str(exc)]
        info = PairInfo(page_size=16, kv_cache_dtype_str="auto", attn_tp_size=1, attn_cp_size=1, pp_size=1)
        ctx = type("Ctx", (), {})()
        ctx.extra = {"pd_behaviour": (b, bd), "pair_info": (info, info)}
        ctx.decode = type("S", (), {"args": type("A", (), {"dcp_size": 1})()})()
        ctx.decode_geometry = None
        findings = [f for f in REGISTRY["registration-frames"].run(ctx) if f.runtime_error is not None]
        predicted = [findings[0].runtime_error.type, findings[0].runtime_error.message] if findings else None
        n += 1
        if predicted is not None and runtime != predicted:
            out["disagreements"].append({"part": "registration", "decode": other, "runtime": runtime, "builtin": predicted})
            out["n_disagreements"] += 1
        if predicted is None and runtime is None:
            out["disagreements"].append({"part": "registration", "decode": other, "note": "frame layouts differ but this release parsed it"})
            out["n_disagreements"] += 1
    out["registration"] = n


def transfer_part(rk, b, n: int, rng: random.Random, out: dict) -> None:
    from conformance_pairs import transfer_pair
    from kvcheck.sglang import plan as builtin

    bad = []
    done = 0
    outcomes = out.setdefault("transfer_outcomes", {})
    for _ in range(n):
        # 0.5.5 .. 0.5.14 know no memory kinds: VRAM-only pairs; decode DCP from 0.5.17
        prefill, decode, dcp, pp_rank, heads = transfer_pair(rng, vram_only=b.per_request_decision or b.decision_variant == "0.5.13", dcp=b.dcp_relayout)
        try:
            want = rk.decide_transfer(prefill, decode, decode_dcp_size=dcp, pp_rank=pp_rank, total_kv_heads=heads)
        except rk.KernelSetupError as exc:
            out["transfer_skipped"] = str(exc)
            return
        got = builtin.decide_transfer(prefill, decode, decode_dcp_size=dcp, pp_rank=pp_rank, total_kv_heads=heads, behaviour=b)
        if got.path == "not_modeled":  # kvcheck reports unchecked for it: nothing to compare
            out["transfer_not_modeled"] = out.get("transfer_not_modeled", 0) + 1
            continue
        done += 1
        key = want.path or (want.error.type + ":" + want.error.message[:40] if want.error else "?")
        outcomes[key] = outcomes.get(key, 0) + 1
        same = want.contract() == got.contract() and _err(want.error) == _err(got.error) and (want.path is None or want.dst_indices == got.dst_indices)
        if b.per_request_decision and want.path is not None:  # 0.5.5 .. 0.5.12.post1: the bytes of each first descriptor too
            same = same and want.write_lens == got.write_lens
        if not same:
            bad.append({"runtime": [want.contract(), _err(want.error), want.dst_indices], "builtin": [got.contract(), _err(got.error), got.dst_indices]})
    out["transfer"] = done
    out["disagreements"] += bad[:20]
    out["n_disagreements"] += len(bad)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", required=True)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--transfer-pairs", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    from kvcheck.sglang import runtime_kernel as rk
    from kvcheck.sglang.pd_release import behaviour

    out = {"release": a.release, "imported": rk.runtime_version(), "sglang_file": None, "disagreements": [], "n_disagreements": 0}
    import sglang

    out["sglang_file"] = sglang.__file__
    b = behaviour(a.release)
    rng = random.Random(a.seed)
    out["import_seconds"] = round(time.perf_counter() - t0, 2)
    timings = out.setdefault("part_seconds", {})
    t = time.perf_counter()
    if b.bootstrap_modeled:
        bootstrap_part(rk, b, a.pairs, rng, out)
        if b.route == "v2":  # v1 decodes (before 0.5.10) have no PrefillServerInfo
            route_part(rk, b, out)
        timings["bootstrap+route"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    registration_part(rk, b, out)
    timings["registration"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    if a.transfer_pairs and b.decision_modeled:
        transfer_part(rk, b, a.transfer_pairs, rng, out)
        timings["transfer"] = round(time.perf_counter() - t, 2)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
