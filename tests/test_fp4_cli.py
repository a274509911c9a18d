"""FP4 KV pairs through the CLI (``kvcheck preflight --format json``), as an operator runs
them: the exit status, the finding ids, the regions and the runtime's start-up texts.
The values come from SGLang 0.5.23 (tests/test_geometry_fp4_runtime.py builds the pools,
tests/test_startup_fp4.py runs the start-up path)."""

from __future__ import annotations

from tests.helpers import preflight_json, runtime_messages

NIXL = {"disaggregation-transfer-backend": "nixl"}


def _pair(**kw):
    p = {"disaggregation-mode": "prefill", **NIXL, **kw}
    d = {"disaggregation-mode": "decode", **NIXL, **kw}
    return p, d


def test_fp4_mha_pair_fails_on_unsent_block_scales(tmp_path):
    p, d = _pair(**{"kv-cache-dtype": "fp4_mx_block16", "attention-backend": "triton", "page-size": 16, "tp-size": 2,
                    "kvcheck-gpu": "b200"})
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", p, d)
    assert rc == 1 and report["verdict"] == "fail"
    errors = [f["id"] for f in report["findings"] if f["severity"] == "error"]
    assert errors == ["fp4-block-scales"]
    # 32 layers x (K + V), 16 tokens x 4 KV heads x 64 bytes (head_dim 128, two values a byte)
    side = report["sides"][0]
    assert side["n_regions"] == 64 and side["item_lens"] == [16 * 4 * 64]


def test_fp4_mla_pair_fails_on_unsent_block_scales(tmp_path):
    p, d = _pair(**{"kv-cache-dtype": "fp4_mx_block16", "attention-backend": "flashinfer", "page-size": 64, "tp-size": 8,
                    "kvcheck-gpu": "h100"})
    rc, report = preflight_json(tmp_path, "deepseek-v3", p, d)
    assert rc == 1 and [f["id"] for f in report["findings"] if f["severity"] == "error"] == ["fp4-block-scales"]
    assert report["sides"][1]["item_lens"] == [64 * (512 + 64) // 2]


def test_fp4_default_backend_refused_at_start_up(tmp_path):
    p, d = _pair(**{"kv-cache-dtype": "fp4_mx_block16", "page-size": 16, "kvcheck-gpu": "h100"})
    rc, report = preflight_json(tmp_path, "llama-3.1-8b", p, d)
    assert rc == 1
    assert "KV4 MHA expects attention_backend to be one of ['triton', 'torch_native', 'flex_attention', 'trtllm_mha'], but got fa3" \
        in runtime_messages(report)
