"""The PD path as a whole: every independent failure, in the runtime's order; the releases
each side runs; first-request checks; silent corruption.

Expected texts are SGLang's own (the function each comes from is named per test); the
release-by-release agreement of the builtin restatement with each release's code is
proven by tests/test_conformance_releases.py.
"""

from __future__ import annotations

import pytest

from helpers import write_config
from kvcheck.preflight import run_preflight
from kvcheck.sglang.pd_release import behaviour, known_releases
from kvcheck.sources import load_side

N = {"disaggregation-transfer-backend": "nixl"}
P = {"disaggregation-mode": "prefill", **N}
D = {"disaggregation-mode": "decode", **N}


def _pair(tmp_path, model, pa, da, *, pv=None, dv=None, penv=None, denv=None):
    if penv:
        pa = {**pa, "kvcheck-env": penv}
    if denv:
        da = {**da, "kvcheck-env": denv}
    p = load_side(str(write_config(tmp_path, "prefill", model, pa)), "prefill", sglang_version="0.5.23")  # the release this rested on (was the installed SGLang)
    d = load_side(str(write_config(tmp_path, "decode", model, da)), "decode", sglang_version="0.5.23")
    p.sglang_version, d.sglang_version = pv, dv
    return run_preflight(p, d, kernel="builtin")


def _by_id(report):
    return {f.id: f for f in report.findings}


def test_every_independent_failure_is_reported_in_the_runtime_order(tmp_path):
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "pp-size": 2}, {**D, "page-size": 32, "pp-size": 4, "kv-cache-dtype": "bf16"},
              penv={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "600"}, denv={"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "900"})
    f = _by_id(r)
    # try_ensure_parallel_info: page size, then kv dtype; _resolve_rank_mapping: PP; then the prefill's registration.
    assert [f[i].runtime_error.order for i in ("page-size-mismatch", "kv-cache-dtype-mismatch", "pp-size-mismatch", "region-count")] == [1, 2, 3, 4]
    assert f["page-size-mismatch"].runtime_error.first and not f["region-count"].runtime_error.first
    # timeouts come from each side's environment, not a fixed 300 s
    sees = f["region-count"].runtime_error.operator_sees
    assert "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600 s" in sees and "SGLANG_DISAGGREGATION_WAITING_TIMEOUT=900 s" in sees
    # each PP stage is shown
    assert [s["pp_rank"] for s in r.extra["pp_stages"]] == [0, 1]


def test_releases_are_read_from_each_release_s_source():
    assert known_releases()[0] == "0.5.5" and known_releases()[-1] == "0.5.23"
    b8, b10, b23 = behaviour("0.5.8"), behaviour("0.5.10"), behaviour("0.5.23")
    assert (b8.route, b10.route) == ("v1", "v2")
    assert (b8.gpu_id_frame, b23.gpu_id_frame) == (7, 8)
    assert b23.registration_sends == 24 and b23.registration_reads == 23  # frame 23: state data lengths
    assert behaviour("0.5.22").registration_sends == 23
    assert behaviour("0.5.12").hisparse_skips_page_size and not behaviour("0.5.13").hisparse_skips_page_size
    assert not behaviour("0.5.16").decode_dcp_checks and behaviour("0.5.17").decode_dcp_checks
    assert behaviour("0.5.12").nixl_stateless_hang and not behaviour("0.5.12.post1").nixl_stateless_hang
    assert not behaviour("9.9.9").known


def test_a_newer_prefill_breaks_an_older_decode_s_route_reply(tmp_path):
    # 0.5.23's _handle_route_get sends enable_kv_cache_sharding; 0.5.22's PrefillServerInfo has no such field.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.23", dv="0.5.22")
    rt = _by_id(r)["route-compat"].runtime_error
    assert (rt.type, rt.message) == ("TypeError", "PrefillServerInfo.__init__() got an unexpected keyword argument 'enable_kv_cache_sharding'")
    assert r.verdict == "fail" and r.extra["releases"] == {"prefill": "0.5.23", "decode": "0.5.22"}
    # the other way round the decode accepts the reply (the older prefill sends a subset)
    r2 = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.22", dv="0.5.23")
    assert "route-compat" not in _by_id(r2)


def test_a_0_5_8_prefill_cannot_parse_a_newer_registration(tmp_path):
    # 0.5.8's KVArgsRegisterInfo.from_zmq: gpu_id=int(msg[7]); 0.5.9+ decodes send state pointers (b'') there.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.8", dv="0.5.23")
    f = _by_id(r)
    assert (f["registration-frames"].runtime_error.type, f["registration-frames"].runtime_error.message) == ("ValueError", "invalid literal for int() with base 10: ''")
    # the 0.5.8 prefill's per-request transfer and the 0.5.23 decode's checks are both restated
    assert "route-compat" in f and "release-pd-unchecked" not in f


def test_unmodeled_releases_are_unchecked_never_the_newest_answer(tmp_path, monkeypatch):
    # A known release whose decision digest kvcheck has not restated (0.5.18's variant
    # taken out of DECISION_VARIANTS, as a release with new code would be).
    from kvcheck.sglang import pd_release

    variants = {k: v for k, v in pd_release.DECISION_VARIANTS.items() if v != "0.5.17"}
    monkeypatch.setattr(pd_release, "DECISION_VARIANTS", variants)
    pd_release.behaviour.cache_clear()
    try:
        r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.18", dv="0.5.18")
    finally:
        monkeypatch.undo()
        pd_release.behaviour.cache_clear()
    assert r.verdict == "unchecked" and r.exit_code == 4
    assert r.plan is None and "release-pd-unchecked" in _by_id(r)
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.6.0", dv="0.6.0")
    assert r.verdict == "unchecked"


def test_0_5_12_hangs_models_without_hybrid_state(tmp_path):
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.12.post1", dv="0.5.12")
    hangs = [f for f in r.findings if f.id == "nixl-stateless-hang"]
    assert len(hangs) == 1 and hangs[0].message.startswith("decode runs SGLang 0.5.12")


def test_plain_dp_prefill_with_follow_bootstrap_room(tmp_path):
    # CommonKVSender.__init__ (0.5.23): attn_dp_rank (0 without DP attention) != bootstrap_room % num_dp_ranks.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "dp-size": 2}, {**D, "page-size": 16})
    rt = _by_id(r)["follow-bootstrap-room-plain-dp"].runtime_error
    assert "follow_bootstrap_room conflict: dispatched to dp_rank 0" in rt.message
    ok = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "attn-dp-size": 2, "tp-size": 2}, {**D, "page-size": 16})
    assert "follow-bootstrap-room-plain-dp" not in _by_id(ok)


def test_metadata_buffers_on_one_side_only(tmp_path):
    # MetadataBuffers.get_buf_infos: the checksum is the last buffer, the sampling mask sits in the middle.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "disaggregation-enable-kv-checksum": True}, {**D, "page-size": 16})
    f = _by_id(r)["aux-buffer-count"]
    assert f.severity.value == "warning" and "registered 10 metadata buffers but this prefill has 11" in f.message
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, denv={"SGLANG_ENABLE_DISAGG_SAMPLING_MASK": "1"})
    assert _by_id(r)["aux-buffer-count"].severity.value == "error"


@pytest.mark.parametrize("pd,dd,ids", [("float16", "bfloat16", {"dtype-under-auto"}), ("bfloat16", "float32", {"dtype-under-auto", "item-length-larger"})])
def test_dtype_under_auto_is_silent_corruption(tmp_path, pd, dd, ids):
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "dtype": pd}, {**D, "page-size": 16, "dtype": dd})
    errors = {f.id for f in r.findings if f.severity.value == "error"}
    assert ids <= errors and r.verdict == "fail"


def test_uneven_pp_with_unequal_tp_writes_v_into_k(tmp_path):
    # get_mha_kv_ptrs_with_pp pairs stage 0's V slices with decode K regions (20-layer stage of 32).
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "pp-size": 2, "tp-size": 2}, {**D, "page-size": 16, "tp-size": 4},
              penv={"SGLANG_PP_LAYER_PARTITION": "20,12"})
    msgs = [f.message for f in r.findings if f.id == "hetero-tp-kv-misrouted"]
    assert any("(target layer 0 V) is written into decode region 20 (target layer 20 K)" in m for m in msgs)


def test_head_slice_assert_when_kv_heads_are_replicated(tmp_path):
    # _init_hetero_tp_prep_handle: 8 KV heads, prefill TP 16 -> decode TP 32: num_groups = 32 // 16 // 4 = 0.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "tp-size": 16}, {**D, "page-size": 16, "tp-size": 32})
    rt = _by_id(r)["head-slice-assert"].runtime_error
    assert (rt.type, rt.message, rt.when) == ("AssertionError", "", "decode registration")


def test_dsa_fp8_rows_name_the_role_backends(tmp_path):
    base = {"page-size": 64, "tp-size": 8, "kv-cache-dtype": "fp8_e4m3"}
    r = _pair(tmp_path, "deepseek-v3.2", {**P, **base, "dsa-prefill-backend": "trtllm"}, {**D, **base, "dsa-decode-backend": "flashmla_kv"})
    f = _by_id(r)["item-length-larger"]
    assert f.severity.value == "error" and "--dsa-prefill-backend trtllm" in f.message and "--dsa-decode-backend flashmla_kv" in f.message


def test_a_shorter_dsa_destination_row_names_the_role_backends(tmp_path):
    # _prep_equal_tp_dlist raises when the prefill's 656-byte scaled rows go into 576-byte raw rows.
    base = {"page-size": 64, "tp-size": 8, "kv-cache-dtype": "fp8_e4m3"}
    r = _pair(tmp_path, "deepseek-v3.2", {**P, **base, "dsa-prefill-backend": "flashmla_kv"}, {**D, **base, "dsa-decode-backend": "trtllm"})
    f = _by_id(r)["item-stride"]
    assert f.runtime_error.message.startswith("NIXL prepared dlist transfer length exceeds item stride: xfer_len=41984, item_len=36864")
    assert "--dsa-decode-backend trtllm" in f.message and "trtllm" in f.fix


def test_0_5_14_prefill_decision_is_restated(tmp_path):
    # 0.5.13/0.5.14 _prepare_payload_xfer: equal TP -> _init_equal_tp_prep_handle, VRAM lists
    # (no memory kinds before 0.5.15); nothing raises at registration.
    assert behaviour("0.5.14").decision_variant == "0.5.13" and behaviour("0.5.16").decision_variant == "0.5.15"
    assert behaviour("0.5.18").decision_variant == "0.5.17" and behaviour("0.5.21").decision_variant == "0.5.21"
    assert behaviour("0.5.12.post1").per_request_decision
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.14", dv="0.5.14")
    assert r.exit_code == 0 and r.plan.path == "equal_tp" and r.plan.segments[0].as_list()[2:] == ["VRAM", "VRAM"]
    assert "release-pd-unchecked" not in _by_id(r)
    # a prefill PP > 1 pairs regions positionally from decode layer 0 there: not modeled, unchecked
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "pp-size": 2}, {**D, "page-size": 16}, pv="0.5.14", dv="0.5.14")
    assert r.exit_code == 4 and "release-pd-unchecked" in _by_id(r)
    # first-request checks not restated for 0.5.14: unchecked only where they could fire
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "disaggregation-enable-kv-checksum": True}, {**D, "page-size": 16}, pv="0.5.14", dv="0.5.14")
    assert r.exit_code == 4 and "metadata (aux) buffers" in _by_id(r)["release-pd-unchecked"].message
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "dp-size": 2}, {**D, "page-size": 16}, pv="0.5.14", dv="0.5.14")
    assert r.exit_code == 4 and "plain-DP" in _by_id(r)["release-pd-unchecked"].message
