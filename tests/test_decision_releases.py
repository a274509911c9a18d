"""The prefill registration decision of 0.5.15 .. 0.5.21, branch by branch (builtin).

Each expected value cites the release's own code (``sglang/srt/disaggregation/nixl/conn.py``
and ``utils.py`` of that release); ``tests/test_conformance_releases.py`` drives the
installed 0.5.16, 0.5.17, 0.5.21 and 0.5.22 against the same restatement on a seeded corpus.
"""

from __future__ import annotations

from conformance_pairs import side
from helpers import write_config
from kvcheck.preflight import run_preflight
from kvcheck.sglang.pd_release import _vkey, DECISION_VARIANTS, behaviour
from kvcheck.sglang.plan import decide_transfer
from kvcheck.sources import load_side


def _mla(role, n, *, pp=1, stages=None, kinds="VRAM", items=None, n_draft=0, page=16):
    return side(role, is_mla=True, tp=1, pp=pp, stages=stages or [(0, n)], page=page, kinds=[kinds] * n,
                items=items or [page * 576] * n, n_draft=n_draft)


def test_each_release_from_0_5_13_has_a_modeled_decision():
    # pd_facts.json digests of _add_remote_peer -> _prepare_payload_xfer and helpers.
    assert {behaviour(v).decision_variant for v in ("0.5.17", "0.5.18")} == {"0.5.17"}
    assert [behaviour(v).decision_variant for v in ("0.5.19", "0.5.20", "0.5.21")] == ["0.5.19", "0.5.20", "0.5.21"]
    assert sorted(set(DECISION_VARIANTS.values()), key=_vkey)[-7:] == [
        "0.5.15", "0.5.17", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]


def test_dcp_geometry_whole_list_before_0_5_20_per_entry_after():
    # MLA prefill with one draft entry, decode DCP 2: the decode's draft page holds
    # page_size * dcp_size tokens. 0.5.17 .. 0.5.19 prepare_dcp_token_item_lens compares
    # item_len // page_size lists and raises; 0.5.20 scales draft entries by dcp_size.
    p = _mla("prefill", 3, n_draft=1)
    d = _mla("decode", 3, n_draft=1, items=[16 * 576, 16 * 576, 2 * 16 * 576])
    old = decide_transfer(p, d, decode_dcp_size=2, behaviour=behaviour("0.5.19"))
    assert (old.error.type, old.error.message) == (
        "RuntimeError", "PD DCP source/destination KV geometry differs: src=[576, 576, 576], dst=[576, 576, 1152]")
    new = decide_transfer(p, d, decode_dcp_size=2, behaviour=behaviour("0.5.20"))
    assert new.error is None and new.path == "dcp_relayout" and new.dst_indices == [0, 1, 2]
    # requires_dcp_relayout (0.5.17): a non-MLA prefill refuses decode DCP
    mha = side("prefill", is_mla=False, tp=1, pp=1, stages=[(0, 1)], page=16, kinds=["VRAM"] * 2, items=[4096] * 2)
    r = decide_transfer(mha, mha.model_copy(update={"role": "decode"}), decode_dcp_size=2, behaviour=behaviour("0.5.17"))
    assert (r.error.type, r.error.message) == ("RuntimeError", "Unsupported PD DCP topology: 1 -> 2")


def test_pp_mla_offsets_from_0_5_21():
    # Prefill PP 2 (stage 1 = layers [2, 4)) into a decode that registered all 4 layers.
    # 0.5.17 .. 0.5.20: build_transfer_entry_pairs without layer ids and pp_size > 1 raises;
    # 0.5.21: _build_transfer_dst_indices maps the stage onto its layer span.
    p = _mla("prefill", 2, pp=2, stages=[(0, 2), (2, 4)])
    d = _mla("decode", 4)
    old = decide_transfer(p, d, pp_rank=1, behaviour=behaviour("0.5.20"))
    assert (old.error.type, old.error.message) == (
        "RuntimeError", "PP-heterogeneous transfer requires layer ids on both peers; got src=2 dst=4 entries")
    new = decide_transfer(p, d, pp_rank=1, behaviour=behaviour("0.5.21"))
    assert new.path == "equal_tp" and new.dst_indices == [2, 3]
    # 0.5.15 .. 0.5.16 take the decode's first regions: what lands where is not modeled
    assert decide_transfer(p, d, pp_rank=1, behaviour=behaviour("0.5.16")).path == "not_modeled"


def test_host_and_mixed_kinds_on_0_5_16():
    # 0.5.15 _prepare_payload_xfer: a uniform DRAM destination (HiSparse host pool) gets one
    # prepared list pair; mixed destination kinds one pair per _kv_xfer_mem_segments run.
    p = _mla("prefill", 4)
    host = decide_transfer(p, _mla("decode", 4, kinds="DRAM"), behaviour=behaviour("0.5.16"))
    assert host.path == "direct_to_host" and host.segments[0].as_list() == [0, 4, "VRAM", "DRAM"]
    d = _mla("decode", 4).model_copy(deep=True)
    d.regions[2].kind = d.regions[3].kind = "DRAM"
    mixed = decide_transfer(p, d, behaviour=behaviour("0.5.16"))
    assert mixed.path == "mixed_segments" and [s.as_list() for s in mixed.segments] == [[0, 2, "VRAM", "VRAM"], [2, 4, "VRAM", "DRAM"]]
    # decode-only draft with a host destination: the 0.5.15 HiSparse refusal
    spec = decide_transfer(p, _mla("decode", 5, kinds="DRAM"), behaviour=behaviour("0.5.15"))
    assert spec.error.message == "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding."
    # a decode DCP is not in 0.5.16's 19 registration frames: not modeled
    assert decide_transfer(p, _mla("decode", 4), decode_dcp_size=2, behaviour=behaviour("0.5.16")).path == "not_modeled"


def _pair(tmp_path, pa, da, v):
    P = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16}
    D = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}
    p = load_side(str(write_config(tmp_path, "prefill", "llama-3.1-8b", {**P, **pa})), "prefill", sglang_version="0.5.23")  # the release this rested on (was the installed SGLang)
    d = load_side(str(write_config(tmp_path, "decode", "llama-3.1-8b", {**D, **da})), "decode", sglang_version="0.5.23")
    p.sglang_version = d.sglang_version = v
    return run_preflight(p, d, kernel="builtin")


def test_head_slices_that_do_not_tile_are_unchecked_before_0_5_22(tmp_path):
    # 8 KV heads, prefill TP 16 -> decode TP 32: num_groups = 32 // 16 // 4 = 0. 0.5.22's
    # _init_hetero_tp_prep_handle asserts; 0.5.21 prepares the lists without a word.
    r = _pair(tmp_path, {"tp-size": 16}, {"tp-size": 32}, "0.5.21")
    assert r.exit_code == 4 and r.plan.path == "not_modeled"
    assert "do not tile the items" in {f.id: f for f in r.findings}["release-pd-unchecked"].message
    r = _pair(tmp_path, {"tp-size": 16}, {"tp-size": 32}, "0.5.22")
    assert r.plan.error is not None and r.plan.error.type == "AssertionError"


def test_a_0_5_21_pair_is_judged_by_its_own_decision(tmp_path):
    r = _pair(tmp_path, {"tp-size": 2}, {"tp-size": 2}, "0.5.21")
    assert r.exit_code == 0 and r.plan.path == "equal_tp" and "release-pd-unchecked" not in {f.id for f in r.findings}
    # unequal TP whose head slices tile (8 KV heads, TP 2 -> 4: 4 heads per prefill rank
    # sent as 2 groups of 2): 0.5.17 prepares the slices as 0.5.22 does, without asserts.
    r = _pair(tmp_path, {"tp-size": 2}, {"tp-size": 4}, "0.5.17")
    assert r.exit_code == 0 and r.plan.path == "hetero_tp_slice" and r.plan.dst_indices[:4] == [0, 1, 2, 3]


def test_a_prefill_without_kv_regions_fails_to_start_on_0_5_16_only():
    # NixlKVManager.__init__: 0.5.15/0.5.16 call _homogeneous_kv_mem_kind(kinds, "source")
    # even for no regions (set() has no single kind); 0.5.17 adds `and kv_data_mem_kinds`
    # and _prepare_payload_xfer returns early for n_src == 0.
    p, d = _mla("prefill", 0), _mla("decode", 0)
    old = decide_transfer(p, d, behaviour=behaviour("0.5.16"))
    assert (old.error.type, old.error.message, old.error.when) == (
        "NotImplementedError", "NIXL source mixed KV memory kinds are not implemented safely yet: []", "start-up")
    assert decide_transfer(p, d, behaviour=behaviour("0.5.17")).path == "nothing_to_transfer"
