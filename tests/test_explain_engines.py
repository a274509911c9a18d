"""`kvcheck explain` matches whole messages and tells other engines' lines apart.

The vLLM, TensorRT-LLM, Mooncake and UCX lines below follow those projects' own log
formats (vLLM's ``(VllmWorker rank=N pid=P) LEVEL MM-DD hh:mm:ss [file.py:N]`` prefix,
TensorRT-LLM's ``[TRT-LLM] [E]``, glog lines of Mooncake's ``transfer_engine.cpp``, UCX's
``UCX  ERROR``); each shares words with SGLang's own messages (page size, NIXL, KV).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvcheck.explain.matcher import explain_text

SGLANG_PAGE = (
    "RuntimeError: Page size mismatch: prefill server has page_size=32, but decode server has "
    "page_size=64. Both servers must use the same --page-size value."
)

FOREIGN = {
    "vllm": "(VllmWorker rank=0 pid=4711) ERROR 12-01 10:00:00 [nixl_connector.py:812] NIXL handshake failed: page size mismatch with remote",
    "trtllm": "[TRT-LLM] [E] KV cache transceiver: Page size mismatch between context and generation",
    "mooncake": "E1201 10:00:00.123 4711 transfer_engine.cpp:212] Failed to install transport rdma for KV transfer",
    "ucx": "[1701423.125] node-1:4711:0  UCX  ERROR   no such device: mlx5_9 (NIXL create_backend)",
}


@pytest.mark.parametrize("engine", sorted(FOREIGN))
def test_another_engines_line_is_named_as_such_not_explained_from_sglang(engine):
    result = explain_text(FOREIGN[engine])
    assert [f.engine for f in result.foreign] == [engine]
    assert result.hits == []  # not explained from SGLang's catalog, not even partially
    # explained (exit 0) only where a signature or rule reads the line; a line only named
    # as another engine's is said "not explained" (exit 1)
    explained = any(f.explains for f in result.report.findings)
    assert result.exit_code == (0 if explained else 1) and result.recognized is explained
    assert result.attributed_only == ([] if explained else [result.foreign[0].name])


def test_a_log_mixing_sglang_and_vllm_lines_explains_only_sglangs():
    log = "\n".join([FOREIGN["vllm"], SGLANG_PAGE, FOREIGN["vllm"]])
    result = explain_text(log, source="log")
    assert [h.entry_id for h in result.hits] == ["page-size-mismatch"]
    assert (result.foreign[0].engine, result.foreign[0].count, result.foreign[0].first_line, result.foreign[0].last_line) == ("vllm", 2, 1, 3)


def test_a_fragment_of_a_variable_name_is_not_a_partial_message():
    # Shares "kv_cache_dtype" / "page_size" stretches with catalog templates, but only
    # inside identifiers: no whole-word stretch of the message.
    line = "prefill_kv_cache_dtype_str_mismatch_page_size_decode_server_has_page_size_value"
    result = explain_text(line)
    assert result.hits == [] and result.foreign == []
    assert result.exit_code == 1


def test_a_stretch_from_the_middle_of_a_message_is_not_the_message():
    # whole words of region-count's template, but from its middle: a fragment, not a match
    result = explain_text("decode registered fewer KV regions than prefill, unexpected geometry")
    assert result.hits == []


def test_a_message_cut_short_is_recognized_as_partial():
    result = explain_text("ValueError: NIXL PD transfer: decode registered fewer KV regions (6")
    assert [(h.entry_id, h.match) for h in result.hits] == [("region-count", "partial")]


def test_json_lists_foreign_lines():
    proc = subprocess.run([sys.executable, "-m", "kvcheck", "explain", FOREIGN["mooncake"], "--format", "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["recognized"] is True and out["hits"] == []
    assert out["foreign"][0]["engine"] == "mooncake" and "Mooncake" in out["foreign"][0]["meaning"]
