"""The handed situations (../shared/cases), each restated as a test in our own words.

Every expected value is what SGLang 0.5.23 does with the pair: the exception text is
the runtime's ``str(exception)`` (see kvcheck/sglang/plan.py for the code it comes from).
Each test runs the real CLI in a fresh process on SGLang --config YAML files.
"""

from __future__ import annotations

from helpers import preflight_json, runtime_messages

NIXL = {"disaggregation-transfer-backend": "nixl"}
PREFILL = {"disaggregation-mode": "prefill", **NIXL}
DECODE = {"disaggregation-mode": "decode", **NIXL}
SPEC_MTP = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2}


def test_llama_tp2_aligned_pair_moves_all_64_regions_vram_to_vram(tmp_path):
    # 32 layers x (K, V) = 64 regions on each side, one prepared descriptor list each.
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", {**PREFILL, "tp-size": 2, "page-size": 16}, {**DECODE, "tp-size": 2, "page-size": 16})
    assert rc == 0
    assert report["verdict"] == "pass"
    assert report["plan"]["path"] == "equal_tp"
    assert report["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]
    # nothing wrong; only the line every PD decode logs at start-up (pd_disaggregation_hook,
    # 0.5.22+: "Radix cache is disabled for decode server"), as context, and the NIXL
    # release the servers need (0.5.15+ refuses NIXL < 1.1.0), which nothing here names
    found = [(f["id"], f["severity"]) for f in report["findings"]]
    assert found in ([("decode-radix-disabled", "info")], [("known-issue", "info"), ("decode-radix-disabled", "info")]), found
    radix = next(f for f in report["findings"] if f["id"] == "decode-radix-disabled")
    assert "Radix cache is disabled for decode server" in radix["message"]
    for f in report["findings"]:
        if f["id"] == "known-issue":
            assert "sglang-0.5.15-needs-nixl-1.1" in f["message"] and "NIXL_VERSION" in f["fix"]


def test_hicache_on_prefill_only_still_moves_device_regions(tmp_path):
    # HiCache keeps a host copy for the radix cache; NIXL registers the device pool.
    rc, report = preflight_json(
        tmp_path, "llama-3.1-8b",
        {**PREFILL, "page-size": 16, "enable-hierarchical-cache": True, "hicache-ratio": 2.0},
        {**DECODE, "page-size": 16},
    )
    assert rc == 0 and report["verdict"] in ("pass", "warn")
    assert report["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]
    assert "hicache-no-effect" in [f["id"] for f in report["findings"]]


def test_hisparse_decode_with_decode_only_mtp_is_refused_by_the_prefill(tmp_path):
    base = {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16"}
    rc, report = preflight_json(
        tmp_path, "deepseek-v3.2",
        {**PREFILL, **base},
        {**DECODE, **base, "enable-hisparse": True, "disable-radix-cache": True, **SPEC_MTP},
    )
    assert rc == 1 and report["verdict"] == "fail"
    assert "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding." in runtime_messages(report)
    finding = next(f for f in report["findings"] if f["id"] == "hisparse-decode-only-spec")
    assert finding["runtime_error"]["type"] == "NotImplementedError"
    assert finding["runtime_error"]["when"] == "decode registration"


def test_hisparse_decode_receives_every_region_in_host_memory(tmp_path):
    # DeepSeek V3.2: 61 MLA layers; the HiSparse decode registers its host pool (DRAM).
    base = {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16"}
    rc, report = preflight_json(tmp_path, "deepseek-v3.2", {**PREFILL, **base}, {**DECODE, **base, "enable-hisparse": True, "disable-radix-cache": True})
    assert rc == 0 and report["verdict"] == "pass"
    assert report["plan"]["path"] == "direct_to_host"
    assert report["plan"]["segments"] == [[0, 61, "VRAM", "DRAM"]]


def test_kv_cache_dtype_strings_auto_and_bf16_are_compared_literally(tmp_path):
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", {**PREFILL, "page-size": 16}, {**DECODE, "page-size": 16, "kv-cache-dtype": "bf16"})
    assert rc == 1 and report["verdict"] == "fail"
    assert (
        "KV cache dtype mismatch: prefill server has kv_cache_dtype=auto, but decode server has kv_cache_dtype=bf16. "
        "Both servers must use the same --kv-cache-dtype value."
    ) in runtime_messages(report)


def test_page_sizes_32_and_64_fail_on_the_decodes_first_request(tmp_path):
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", {**PREFILL, "page-size": 32}, {**DECODE, "page-size": 64})
    assert rc == 1
    f = next(f for f in report["findings"] if f["id"] == "page-size-mismatch")
    assert f["runtime_error"]["message"] == (
        "Page size mismatch: prefill server has page_size=32, but decode server has page_size=64. "
        "Both servers must use the same --page-size value."
    )
    assert f["runtime_error"]["type"] == "RuntimeError"
    assert f["runtime_error"]["when"] == "first request"


def test_decode_pp4_against_prefill_pp2_trips_the_rank_mapping_assert(tmp_path):
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", {**PREFILL, "page-size": 16, "pp-size": 2}, {**DECODE, "page-size": 16, "pp-size": 4})
    assert rc == 1
    # The assert's message is a 1-tuple, so str(AssertionError) is the tuple's repr.
    assert "('Decode pp size (4) should be equal to prefill pp size (2) or 1',)" in runtime_messages(report)


def test_prefill_only_mtp_registers_one_region_more_than_the_decode(tmp_path):
    rc, report = preflight_json(tmp_path, "deepseek-v3", {**PREFILL, "tp-size": 8, "page-size": 64, **SPEC_MTP}, {**DECODE, "tp-size": 8, "page-size": 64})
    assert rc == 1
    assert "NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry" in runtime_messages(report)
    assert report["plan"]["n_src"] == 62 and report["plan"]["n_dst"] == 61


def test_decode_left_on_the_default_mooncake_backend_fails(tmp_path):
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", {**PREFILL, "page-size": 16}, {"disaggregation-mode": "decode", "page-size": 16})
    assert rc == 1 and report["verdict"] == "fail"
    f = next(f for f in report["findings"] if f["id"] == "transfer-backend")
    assert f["runtime_error"]["message"] == "First message should be b'NixlMsgGuard'. Foreign traffic?"
    assert "mooncake" in f["message"]
