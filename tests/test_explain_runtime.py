"""The catalog against the installed SGLang 0.5.23: every template is the literal the
runtime's function formats (read from its source), and the messages that can be
triggered on CPU are produced by the real code and recognized."""

from __future__ import annotations

import types

import pytest

from kvcheck.explain import explain_text, load_catalog
from kvcheck.explain.catalog import Entry
from kvcheck.explain.source import entry_problems

pytestmark = pytest.mark.runtime
sglang = pytest.importorskip("sglang")

CATALOG = load_catalog()
SGLANG_ENTRIES = [e for e in CATALOG.entries if any(s.module for s in e.sources)]


def recognized_as(text: str) -> list[str]:
    return [h.entry_id for h in explain_text(text).hits]


@pytest.mark.parametrize("entry", SGLANG_ENTRIES, ids=lambda e: e.id)
def test_template_matches_the_runtime_source_literal(entry):
    assert entry_problems(entry) == []


def test_source_check_catches_drift():
    e = CATALOG.get("page-size-mismatch")
    drifted = Entry(**{**e.model_dump(), "template": e.template.replace("Both servers", "Both sides")})
    assert entry_problems(drifted)


def test_nixl_sources_are_the_classes_sglang_imports():
    import inspect

    from sglang.srt.disaggregation.nixl import conn

    text = inspect.getsource(conn)
    for cls in ("nixlRemoteDisconnectError", "nixlBackendError", "nixlCancelledError"):
        assert cls in text
    assert conn.GUARD == b"NixlMsgGuard"
    assert CATALOG.get("guard-foreign-traffic").template == f"First message should be {conn.GUARD}. Foreign traffic?"


def _raise(fn, *args, **kwargs) -> str:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return f"{type(info.value).__name__}: {info.value}"


def test_mem_kind_helpers_raise_recognized_text():
    from sglang.srt.disaggregation.nixl import conn

    for context, eid in (("destination", "mixed-kinds-destination"), ("source", "mixed-kinds-source"), ("PD DCP destination", "mixed-kinds-dcp")):
        text = _raise(conn._homogeneous_kv_mem_kind, ["VRAM", "DRAM"], context)
        assert recognized_as(text)[0] == eid, text
        assert explain_text(text).hits[0].values == {"kinds": "['DRAM', 'VRAM']"}
    assert recognized_as(_raise(conn._kv_xfer_mem_segments, ["VRAM"], ["VRAM", "DRAM"])) == ["src-dst-kind-length"]
    assert recognized_as(_raise(conn._normalize_kv_mem_kinds, ["VRAM"], 2)) == ["kv-mem-kinds-length"]
    assert recognized_as(_raise(conn._normalize_kv_mem_kinds, ["BLK"], 1)) == ["unsupported-mem-kind"]
    # The empty segment list exists only for empty inputs, which the caller excludes.
    assert conn._kv_xfer_mem_segments([], []) == []


def _manager(**kw):
    from sglang.srt.disaggregation.nixl.conn import NixlKVManager

    mgr = object.__new__(NixlKVManager)
    mgr.__dict__.update(kw)
    return mgr


def _peer(**kw):
    base = dict(requires_dcp_relayout=False, decode_tp_size=8, agent_name="decode-agent", gpu_id=0, dst_num_slots=None)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_prepare_payload_xfer_errors_are_recognized():
    src = dict(kv_args=types.SimpleNamespace(kv_item_lens=[1152] * 62, kv_data_mem_kinds=["VRAM"] * 62), src_mem_kind="VRAM",
               is_mla_backend=True, is_hybrid_mla_backend=False, attn_tp_size=8, prep_handles={})
    mgr = _manager(**src)
    text = _raise(mgr._prepare_payload_xfer, _peer(dst_kv_item_lens=[1152] * 61, dst_kv_mem_kinds=["VRAM"] * 61))
    assert text == "ValueError: NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry"
    assert recognized_as(text) == ["region-count"]

    # HiSparse decode (DRAM target) with a decode-only draft region (VRAM).
    mgr = _manager(**{**src, "kv_args": types.SimpleNamespace(kv_item_lens=[1152] * 61, kv_data_mem_kinds=["VRAM"] * 61)})
    text = _raise(mgr._prepare_payload_xfer, _peer(dst_kv_item_lens=[1152] * 62, dst_kv_mem_kinds=["DRAM"] * 61 + ["VRAM"]))
    assert recognized_as(text) == ["hisparse-decode-only-spec"]

    # Non-MLA, different attention TP, host destination.
    gqa = dict(kv_args=types.SimpleNamespace(kv_item_lens=[4096] * 64, kv_data_mem_kinds=["VRAM"] * 64), src_mem_kind="VRAM",
               is_mla_backend=False, is_hybrid_mla_backend=False, attn_tp_size=2, prep_handles={})
    text = _raise(_manager(**gqa)._prepare_payload_xfer, _peer(decode_tp_size=4, dst_kv_item_lens=[2048] * 64, dst_kv_mem_kinds=["DRAM"] * 64))
    assert recognized_as(text) == ["hetero-tp-direct-to-host"]
    text = _raise(_manager(**gqa)._prepare_payload_xfer, _peer(decode_tp_size=4, dst_kv_item_lens=[2048] * 64, dst_kv_mem_kinds=["DRAM"] * 32 + ["VRAM"] * 32))
    assert recognized_as(text) == ["mixed-kinds-destination"]


def test_prep_equal_tp_dlist_errors_are_recognized():
    mgr = _manager()
    text = _raise(mgr._prep_equal_tp_dlist, "peer", [1, 2], [100, 100], [1000, 1000], 0, kv_xfer_lens=[200, 100])
    assert text == "ValueError: NIXL prepared dlist transfer length exceeds item stride: xfer_len=200, item_len=100, mem_kind=VRAM"
    hit = explain_text(text).hits[0]
    assert hit.entry_id == "item-stride" and hit.values == {"xfer_len": "200", "item_len": "100", "mem_kind": "VRAM"}
    text = _raise(mgr._prep_equal_tp_dlist, "peer", [1], [100, 100], [1000], 0)
    assert recognized_as(text) == ["dlist-geometry-length"]


def _decode_manager(monkeypatch, route: dict, **kw):
    from sglang.srt.disaggregation.common import conn as common

    class Resp:
        status_code = 200
        text = ""

        def json(self):
            return route

    monkeypatch.setattr(common.requests, "get", lambda *a, **k: Resp())
    mgr = object.__new__(common.CommonKVManager)
    base = dict(kv_args=types.SimpleNamespace(page_size=16, state_types=[], engine_rank=0), kv_cache_dtype_str="auto", kv_layout=None,
                is_mla_backend=False, is_hybrid_mla_backend=False, dcp_size=1, attn_tp_size=2, attn_cp_size=1, pp_size=1,
                prefill_info_table={})
    base.update(kw)
    mgr.__dict__.update(base)
    return mgr


ROUTE = dict(attn_tp_size=2, attn_cp_size=1, dp_size=1, pp_size=1, page_size=16, kv_cache_dtype="auto", follow_bootstrap_room=True)


@pytest.mark.parametrize(
    "route, kw, eid",
    [
        ({"page_size": 32}, {"kv_args": types.SimpleNamespace(page_size=64, state_types=[], engine_rank=0)}, "page-size-mismatch"),
        ({}, {"kv_cache_dtype_str": "bf16"}, "kv-cache-dtype-mismatch"),
        ({}, {"dcp_size": 2}, "decode-dcp-requires-mla"),
        ({"attn_cp_size": 2}, {"dcp_size": 2, "is_mla_backend": True}, "decode-dcp-prefill-cp"),
        ({"enable_kv_cache_sharding": True}, {"dcp_size": 2, "is_mla_backend": True}, "decode-dcp-kv-sharding"),
        ({"kv_layout": "a"}, {"kv_layout": "b"}, "kv-layout-mismatch"),
    ],
)
def test_bootstrap_checks_raise_recognized_text(monkeypatch, route, kw, eid):
    mgr = _decode_manager(monkeypatch, {**ROUTE, **route}, **kw)
    try:
        text = _raise(mgr.try_ensure_parallel_info, "127.0.0.1:8998")
    except BaseException:  # pragma: no cover - shows what the runtime did instead
        raise
    assert recognized_as(text)[0] == eid, text


def test_rank_mapping_asserts_are_recognized():
    from sglang.srt.disaggregation.common import conn as common

    mgr = object.__new__(common.CommonKVManager)
    mgr.__dict__.update(kv_args=types.SimpleNamespace(engine_rank=0), is_mla_backend=False, is_hybrid_mla_backend=False,
                        attn_tp_size=2, attn_cp_size=1, attn_cp_rank=0, pp_size=4, pp_rank=0, enable_all_cp_ranks_for_transfer=False)
    info = common.PrefillServerInfo(**{**ROUTE, "pp_size": 2})
    text = _raise(mgr._resolve_rank_mapping, info)
    assert text == "AssertionError: ('Decode pp size (4) should be equal to prefill pp size (2) or 1',)"
    assert recognized_as(text) == ["pp-size-mismatch"]
    mgr.__dict__.update(attn_cp_size=2, pp_size=1)
    assert recognized_as(_raise(mgr._resolve_rank_mapping, common.PrefillServerInfo(**ROUTE))) == ["decode-cp-size"]
    mgr.__dict__.update(attn_cp_size=1, is_mla_backend=True, attn_tp_size=4)
    info = common.PrefillServerInfo(**{**ROUTE, "attn_tp_size": 8, "enable_kv_cache_sharding": True})
    assert recognized_as(_raise(mgr._resolve_rank_mapping, info)) == ["kv-cache-sharding-tp"]


def test_kv_transfer_error_and_timeouts_are_recognized():
    from sglang.srt.disaggregation.common.conn import CommonKVSender, KVTransferError

    records = {}
    kv_mgr = types.SimpleNamespace(bootstrap_timeout=300, defer_decode_allocation=False,
                                   record_failure=lambda room, reason: records.__setitem__(room, reason),
                                   update_status=lambda room, status: None)
    sender = object.__new__(CommonKVSender)
    sender.__dict__.update(kv_mgr=kv_mgr, init_time=0.0, bootstrap_room=77, _prefill_complete_time=None)
    sender._check_bootstrap_timeout()
    reason = records[77]
    assert recognized_as(reason) == ["bootstrap-timeout"]
    text = str(KVTransferError(77, reason))
    ids = recognized_as(text)
    assert ids[0] == "bootstrap-timeout" and "kv-transfer-error" in ids


def test_handed_cases_messages_come_from_the_runtime_templates():
    # The lead's plan texts and the catalog agree with the runtime (already checked
    # above); here: the case texts are the catalog's formatted templates.
    e = CATALOG.get("region-count")
    assert e.format(n_dst=61, n_src=62) == "NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry"
    assert CATALOG.get("pp-size-mismatch").format(decode=4, prefill=2) == "('Decode pp size (4) should be equal to prefill pp size (2) or 1',)"
