"""Same kernel as the runtime: kvcheck's builtin decisions against SGLang's own code.

``kvcheck.sglang.plan`` (builtin) restates SGLang 0.5.23's decisions; the runtime kernel
(``kvcheck.sglang.runtime_kernel``) drives the installed SGLang's own
``try_ensure_parallel_info`` and ``_add_remote_peer`` -> ``_prepare_payload_xfer`` on CPU.
Every expected value here comes from that runtime code: generated geometries and pair
facts (hypothesis) must get the same path, segments, destination regions and exception
(class and exact text) from both; every handed case must get the same report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sglang")

import yaml  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from helpers import MODELS, REPO, write_config  # noqa: E402
from kvcheck.preflight import run_preflight  # noqa: E402
from kvcheck.sglang import plan as builtin  # noqa: E402
from kvcheck.sglang.geometry import Region, SideGeometry  # noqa: E402
from kvcheck.sglang.plan import PairInfo  # noqa: E402
from kvcheck.sources import load_side  # noqa: E402

pytestmark = pytest.mark.runtime

SETTINGS = settings(max_examples=int(300 * float(__import__("os").environ.get("KVCHECK_CONFORMANCE_PAIRS", "1"))), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def rk():
    """The runtime kernel, with SGLang imported once (slow: torch)."""
    from kvcheck.sglang import runtime_kernel

    assert runtime_kernel.runtime_version() == runtime_kernel.SGLANG_VERSION
    return runtime_kernel


def _error(obj):
    e = obj.error if hasattr(obj, "error") else obj
    return None if e is None else (e.type, e.message, e.raised_by, e.when)


def _same_plan(a, b):
    assert (a.path, a.n_src, a.n_dst) == (b.path, b.n_src, b.n_dst), (a, b)
    assert a.contract() == b.contract()
    assert _error(a) == _error(b)
    if b.path is not None:
        assert a.dst_indices == b.dst_indices


# ------------------------------------------------------------------ generated geometry --


def _side(role, *, is_mla, tp, pp, stages, page, kinds, items, n_draft=0):
    rpl = 1 if is_mla else 2
    regions = [
        Region(index=i, kind=k, item_len=l, layer_id=i // rpl if is_mla else i % max(1, (len(kinds) - n_draft) // 2),
               part="KV" if is_mla else ("K" if i < len(kinds) // 2 else "V"), pool="draft" if i >= len(kinds) - n_draft else "target")
        for i, (k, l) in enumerate(zip(kinds, items))
    ]
    return SideGeometry(
        role=role, pool="MLA" if is_mla else "MHA", is_mla=is_mla, attn_tp_size=tp, pp_size=pp, page_size=page,
        page_size_pinned=True, kv_cache_dtype="auto", bytes_per_element=2, regions=regions, num_draft_regions=n_draft,
        stage_layers=stages,
    )


def _kinds(draw, n, mode, n_draft):
    if mode == "vram":
        return ["VRAM"] * n
    if mode == "dram":
        return ["DRAM"] * n
    if mode == "hisparse":  # host target pool, device draft pool
        return ["DRAM"] * (n - n_draft) + ["VRAM"] * n_draft
    return draw(st.lists(st.sampled_from(["VRAM", "DRAM"]), min_size=n, max_size=n))


@st.composite
def transfer_pairs(draw):
    """(prefill geometry, decode geometry, decode DCP size, prefill PP rank)."""
    is_mla = draw(st.booleans())
    rpl = 1 if is_mla else 2
    page = draw(st.sampled_from([1, 16, 64]))
    p_tp = draw(st.sampled_from([1, 2, 4, 8]))
    d_tp = draw(st.one_of(st.just(p_tp), st.sampled_from([1, 2, 4, 8])))
    p_pp = draw(st.sampled_from([1, 1, 2, 3]))
    layers = draw(st.sampled_from([1, 2, 3, 4, 5, 0]))  # layers in each prefill stage
    pp_rank = draw(st.integers(0, p_pp - 1))
    stages = [(r * layers, (r + 1) * layers) for r in range(p_pp)]
    token_bytes = draw(st.sampled_from([64, 128, 576, 1152]))
    item = page * token_bytes
    p_draft = rpl * draw(st.sampled_from([0, 0, 1])) if layers else 0  # prefill-only or shared MTP
    n_src = layers * rpl + p_draft
    # The decode registers the prefill's stage, or the whole model (decode PP 1).
    d_layers = draw(st.sampled_from([layers, layers, layers * p_pp, max(0, layers - 1)]))
    d_draft = draw(st.sampled_from([p_draft, p_draft, 0, rpl, 2 * rpl]))
    n_dst = d_layers * rpl + d_draft
    p_items = [item] * n_src
    d_items = [item] * n_dst
    if n_dst and draw(st.sampled_from([False, False, True])):
        j = draw(st.integers(0, n_dst - 1))
        d_items[j] = draw(st.sampled_from([item // 2, item * 2, item * 4]))
    p_mode = draw(st.sampled_from(["vram"] * 10 + ["dram", "mixed"]))
    d_mode = draw(st.sampled_from(["vram", "vram", "dram", "hisparse", "mixed"]))
    prefill = _side("prefill", is_mla=is_mla, tp=p_tp, pp=p_pp, stages=stages, page=page,
                    kinds=_kinds(draw, n_src, p_mode, p_draft), items=p_items, n_draft=p_draft)
    d_pp = 1 if d_layers != layers else p_pp
    decode = _side("decode", is_mla=is_mla, tp=d_tp, pp=d_pp, stages=[(0, d_layers)], page=page,
                   kinds=_kinds(draw, n_dst, d_mode, d_draft), items=d_items, n_draft=d_draft)
    dcp = draw(st.sampled_from([1] * 6 + [2, 4]))
    return prefill, decode, dcp, pp_rank


@SETTINGS
@given(case=transfer_pairs())
def test_transfer_decision_matches_the_runtime(rk, case):
    prefill, decode, dcp, pp_rank = case
    runtime = rk.decide_transfer(prefill, decode, decode_dcp_size=dcp, pp_rank=pp_rank)
    assert runtime.kernel == "runtime"
    _same_plan(builtin.decide_transfer(prefill, decode, decode_dcp_size=dcp, pp_rank=pp_rank), runtime)


def _g(role, kinds, *, item=1024, is_mla=True, tp=8, pp=1, n_draft=0, stages=None, items=None):
    items = items or [item] * len(kinds)
    return _side(role, is_mla=is_mla, tp=tp, pp=pp, stages=stages or [(0, len(kinds) - n_draft)], page=16,
                 kinds=kinds, items=items, n_draft=n_draft)


V, D = "VRAM", "DRAM"

# Each row: what SGLang's own _prepare_payload_xfer does with this pair (read back from the
# descriptor lists it prepared, or the exception it raised).
PINNED = [
    ("mla-equal", _g("prefill", [V] * 3), _g("decode", [V] * 3), 1, 0, ("equal_tp", [[0, 3, V, V]], None)),
    ("hisparse-host", _g("prefill", [V] * 3), _g("decode", [D] * 3), 1, 0, ("direct_to_host", [[0, 3, V, D]], None)),
    ("mixed-runs", _g("prefill", [V] * 4), _g("decode", [D, D, V, D]), 1, 0,
     ("mixed_segments", [[0, 2, V, D], [2, 3, V, V], [3, 4, V, D]], None)),
    ("hisparse-decode-mtp", _g("prefill", [V] * 3), _g("decode", [D] * 3 + [V], n_draft=1), 1, 0,
     (None, [], ("NotImplementedError", "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding."))),
    ("prefill-only-mtp", _g("prefill", [V] * 4, n_draft=1), _g("decode", [V] * 3), 1, 0,
     (None, [], ("ValueError", "NIXL PD transfer: decode registered fewer KV regions (3) than prefill (4); unexpected geometry"))),
    ("hetero-tp-host", _g("prefill", [V] * 4, is_mla=False, tp=2), _g("decode", [D] * 4, is_mla=False, tp=4, item=512), 1, 0,
     (None, [], ("NotImplementedError", "NIXL heterogeneous-TP direct-to-host KV transfer is not implemented safely yet"))),
    ("hetero-tp-slice", _g("prefill", [V] * 4, is_mla=False, tp=2), _g("decode", [V] * 4, is_mla=False, tp=4, item=512), 1, 0,
     ("hetero_tp_slice", [[0, 4, V, V]], None)),
    ("short-dst-item", _g("prefill", [V] * 2), _g("decode", [V] * 2, item=512), 1, 0,
     (None, [], ("ValueError", "NIXL prepared dlist transfer length exceeds item stride: xfer_len=1024, item_len=512, mem_kind=VRAM"))),
    ("dcp-mla", _g("prefill", [V] * 3), _g("decode", [V] * 3), 2, 0, ("dcp_relayout", [[0, 3, V, V]], None)),
    ("dcp-mha", _g("prefill", [V] * 2, is_mla=False), _g("decode", [V] * 2, is_mla=False), 2, 0,
     (None, [], ("RuntimeError", "Unsupported PD DCP topology: 1 -> 2"))),
    ("pp-mla-stage1", _g("prefill", [V] * 2, pp=2, stages=[(0, 2), (2, 4)]), _g("decode", [V] * 4), 1, 1,
     ("equal_tp", [[0, 2, V, V]], None)),
    ("pp-mla-cell-mismatch", _g("prefill", [V] * 2, pp=2, stages=[(0, 2), (2, 4)]), _g("decode", [V] * 4, items=[1024, 1024, 1024, 512]), 1, 1,
     (None, [], ("RuntimeError", "PP-heterogeneous MLA transfer: decode KV cell geometry differs from prefill over layers [2, 4): "
                                 "prefill item_lens=[1024, 1024], decode item_lens=[1024, 512]"))),
    ("pp-mha-no-layer-ids", _g("prefill", [V] * 2, is_mla=False, pp=2, stages=[(0, 1), (1, 2)]), _g("decode", [V] * 4, is_mla=False), 1, 1,
     (None, [], ("RuntimeError", "PP-heterogeneous transfer requires layer ids on both peers; got src=2 dst=4 entries"))),
]


@pytest.mark.parametrize("name,prefill,decode,dcp,pp_rank,expect", PINNED, ids=[row[0] for row in PINNED])
def test_each_path_and_refusal_is_reached_and_agrees(rk, name, prefill, decode, dcp, pp_rank, expect):
    runtime = rk.decide_transfer(prefill, decode, decode_dcp_size=dcp, pp_rank=pp_rank)
    path, segments, error = expect
    assert runtime.path == path
    assert runtime.contract()["segments"] == segments
    assert (runtime.error and (runtime.error.type, runtime.error.message)) == error
    if name == "pp-mla-stage1":  # stage 1 of a PP prefill writes the decode's layers 2, 3
        assert runtime.dst_indices == [2, 3]
    _same_plan(builtin.decide_transfer(prefill, decode, decode_dcp_size=dcp, pp_rank=pp_rank), runtime)


# ------------------------------------------------------------------ generated pair facts --

DTYPES = ["auto", "bf16", "bfloat16", "fp8_e4m3"]


@st.composite
def pair_infos(draw):
    def info(base=None):
        def pick(field, values):
            if base is not None and draw(st.booleans()):
                return getattr(base, field)
            return draw(st.sampled_from(values))

        return PairInfo(
            page_size=pick("page_size", [1, 16, 32, 64]),
            kv_cache_dtype_str=pick("kv_cache_dtype_str", DTYPES),
            attn_tp_size=pick("attn_tp_size", [1, 2, 4, 8]),
            attn_cp_size=pick("attn_cp_size", [1, 1, 2]),
            pp_size=pick("pp_size", [1, 2, 4]),
            dcp_size=pick("dcp_size", [1, 1, 2]),
            is_mla=pick("is_mla", [False, True]),
            is_hybrid_mla=pick("is_hybrid_mla", [False, False, True]),
            enable_kv_cache_sharding=pick("enable_kv_cache_sharding", [False, False, True]),
            state_types=pick("state_types", [[], [], ["block_scale"], ["minimax_index_k"], ["mamba"]]),
            kv_layout=pick("kv_layout", [None, None, "paged", "unified"]),
            dsv41_spec_layout=pick("dsv41_spec_layout", [None, None, {"block_size": 16}, {"block_size": 32, "draft": "swa"}]),
        )

    prefill = info()
    return prefill, info(prefill)


@SETTINGS
@given(pair=pair_infos())
def test_bootstrap_checks_match_the_runtime(rk, pair):
    prefill, decode = pair
    runtime = rk.bootstrap_error(prefill, decode)
    assert _error(builtin.bootstrap_error(prefill, decode)) == _error(runtime)


def test_bootstrap_pp_assert_text_is_the_tuple_repr(rk):
    p = PairInfo(page_size=16, kv_cache_dtype_str="auto", attn_tp_size=1, attn_cp_size=1, pp_size=2)
    d = p.model_copy(update={"pp_size": 4})
    err = rk.bootstrap_error(p, d)
    assert (err.type, err.message) == ("AssertionError", "('Decode pp size (4) should be equal to prefill pp size (2) or 1',)")
    assert rk.bootstrap_error(p, p) is None


# ------------------------------------------------------------------ handed cases --

NIXL = {"disaggregation-transfer-backend": "nixl"}
P = {"disaggregation-mode": "prefill", **NIXL}
D_ = {"disaggregation-mode": "decode", **NIXL}
MTP = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2}
DSA = {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16"}
HISPARSE = {"enable-hisparse": True, "disable-radix-cache": True}

# The handed situations, restated: (name, model, prefill args, decode args, verdict, runtime error text).
CASES = [
    ("aligned-llama-tp2", "llama-3.1-8b", {**P, "tp-size": 2, "page-size": 16}, {**D_, "tp-size": 2, "page-size": 16}, "pass", None),
    ("hicache-asymmetric", "llama-3.1-8b", {**P, "page-size": 16, "enable-hierarchical-cache": True, "hicache-ratio": 2.0},
     {**D_, "page-size": 16}, None, None),
    ("hisparse-decode-only-mtp", "deepseek-v3.2", {**P, **DSA}, {**D_, **DSA, **HISPARSE, **MTP}, "fail",
     "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding."),
    ("hisparse-direct-to-host", "deepseek-v3.2", {**P, **DSA}, {**D_, **DSA, **HISPARSE}, "pass", None),
    ("kv-dtype-auto-vs-bf16", "llama-3.1-8b", {**P, "page-size": 16}, {**D_, "page-size": 16, "kv-cache-dtype": "bf16"}, "fail",
     "KV cache dtype mismatch: prefill server has kv_cache_dtype=auto, but decode server has kv_cache_dtype=bf16. "
     "Both servers must use the same --kv-cache-dtype value."),
    ("page-size-mismatch", "llama-3.1-8b", {**P, "page-size": 32}, {**D_, "page-size": 64}, "fail",
     "Page size mismatch: prefill server has page_size=32, but decode server has page_size=64. Both servers must use the same --page-size value."),
    ("pp-mismatch", "llama-3.1-8b", {**P, "page-size": 16, "pp-size": 2}, {**D_, "page-size": 16, "pp-size": 4}, "fail",
     "('Decode pp size (4) should be equal to prefill pp size (2) or 1',)"),
    ("prefill-only-mtp", "deepseek-v3", {**P, "tp-size": 8, "page-size": 64, **MTP}, {**D_, "tp-size": 8, "page-size": 64}, "fail",
     "NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry"),
    ("transfer-backend-mismatch", "llama-3.1-8b", {**P, "page-size": 16}, {"disaggregation-mode": "decode", "page-size": 16}, "fail", None),
]


def _both_kernels(tmp: Path, model: str, prefill_args: dict, decode_args: dict, decode_model: str | None = None):
    p = load_side(str(write_config(tmp, "prefill", model, prefill_args)), "prefill", sglang_version="0.5.23")  # the release this rested on (was the installed SGLang)
    d = load_side(str(write_config(tmp, "decode", decode_model or model, decode_args)), "decode", sglang_version="0.5.23")
    return run_preflight(p, d, kernel="builtin"), run_preflight(p, d, kernel="runtime")


def _assert_same_report(b, r):
    assert (b.kernel, r.kernel) == ("builtin", "runtime")
    cb, cr = b.contract(), r.contract()
    assert cb["verdict"] == cr["verdict"]
    assert cb["plan"] == cr["plan"]
    assert cb["findings"] == cr["findings"]
    if b.plan is not None:
        assert b.plan.dst_indices == r.plan.dst_indices


@pytest.mark.parametrize("name,model,prefill_args,decode_args,verdict,message", CASES, ids=[c[0] for c in CASES])
def test_handed_case_same_report_from_both_kernels(tmp_path, rk, name, model, prefill_args, decode_args, verdict, message):
    b, r = _both_kernels(tmp_path, model, prefill_args, decode_args)
    _assert_same_report(b, r)
    if verdict is not None:
        assert r.verdict == verdict
    if message is not None:
        assert message in [f.runtime_error.message for f in r.findings if f.runtime_error]


SHARED_CASES = sorted((REPO.parent / "shared" / "cases").glob("*.yaml"))


@pytest.mark.skipif(not SHARED_CASES, reason="../shared/cases is not beside this checkout")
@pytest.mark.parametrize("case_file", SHARED_CASES, ids=[c.stem for c in SHARED_CASES])
def test_shared_case_same_report_from_both_kernels(tmp_path, rk, case_file):
    case = yaml.safe_load(case_file.read_text())
    models = {role: case[role].get("model", case["model"]) for role in ("prefill", "decode")}
    if not all((MODELS / m / "config.json").exists() for m in models.values()):
        pytest.skip(f"model config not bundled in configs/models: {sorted(models.values())}")
    b, r = _both_kernels(tmp_path, models["prefill"], case["prefill"].get("args") or {}, case["decode"].get("args") or {}, models["decode"])
    _assert_same_report(b, r)
    expect = case.get("expect") or {}
    verdicts = expect.get("verdict", "pass")
    assert r.verdict in (verdicts if isinstance(verdicts, list) else [verdicts])
    if expect.get("runtime_error"):
        assert expect["runtime_error"] in [f.runtime_error.message for f in r.findings if f.runtime_error]
    if expect.get("segments"):
        assert r.contract()["plan"]["segments"] == expect["segments"]
