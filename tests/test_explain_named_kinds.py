"""Lines of other engines and native libraries that kvcheck named but did not explain
(issue 20, round 11): each kind's cause as its project's thread states it, the engine named,
and never an SGLang catalog message. Excerpts written here in each project's log format."""

from __future__ import annotations

import pytest

from kvcheck.explain import explain_text

CASES = [
    (
        # a gdb backtrace of a Mooncake EFA process: libfabric's SHM reassembly copying into GPU memory
        "#0  __memcpy_evex_unaligned ()\n#1  ofi_memcpy ()\n#2  ofi_copy_to_mr_iov ()\n#3  smr_copy_from_sar ()\n"
        "#4  smr_ep_progress ()\n#5  fi_cq_read ()\n#6  mooncake::EfaContext::pollCq(int) ()\n",
        "libfabric-shm-gpu-host-memcpy",
        "libfabric",
        "first-transfer",
        "FI_EFA_ENABLE_SHM_TRANSFER=0",
    ),
    (
        "W20260601 09:00:00.100000 140000000000000 transfer_engine_impl.cpp:700] InternalError: "
        "cudaIpcGetMemHandle(&handle, (void*)ptr): invalid argument\n",
        "mooncake-nvlink-ipc-export-vmm",
        "mooncake",
        "startup",
        "#2089",
    ),
    (
        "[TensorRT-LLM][ERROR] Exception in DataRequester request(): Message truncated\n",
        "trtllm-data-requester-message-truncated",
        "trtllm",
        "first-transfer",
        "cache_transceiver_config",
    ),
    (
        "[Orchestrator][PD] Missing prefill kv_transfer_params.remote_request_id\n",
        "vllm-omni-orchestrator-remote-request-id",
        "vllm-omni",
        "first-request",
        "#5900",
    ),
    (
        "F20260702 11:00:00.000000 2001 batch_input_builder.cpp:400] Check failed: remote_size >= remote_end (2 vs. 4)\n"
        "remote block coverage shortage\n",
        "xllm-pd-remote-block-shortage",
        "xllm",
        "serving",
        "prefix cache",
    ),
]


@pytest.mark.parametrize("text,sig,engine,phase,fix_word", CASES, ids=[c[1] for c in CASES])
def test_the_kind_is_explained_as_its_projects(text, sig, engine, phase, fix_word):
    rep = explain_text(text, source="log").report
    f = rep.first_cause
    assert f is not None and f.id == sig
    assert f.engine == engine and f.phase == phase
    assert fix_word in f.fix or fix_word in f.cause
    assert not any(x.kind == "catalog" and x.engine == "sglang" for x in rep.findings)


def test_vllm_omni_and_xllm_lines_are_named_as_theirs():
    for text, _, engine, _, _ in CASES[3:]:
        rep = explain_text(text, source="log").report
        assert engine in {e.engine for e in rep.engines}


def test_one_nixl_plugin_that_does_not_load_is_a_warning_naming_only_that_backend():
    text = (
        "E1101 09:00:00.000001       7 nixl_plugin_manager.cpp:122] Failed to load plugin from /venv/lib/nixl/plugins/"
        "libplugin_LIBFABRIC.so: /usr/lib/libfabric.so.1: version `FABRIC_1.9' not found\n"
        "E1101 09:00:00.000002       7 nixl_plugin_manager.cpp:288] Failed to load plugin 'LIBFABRIC' from any directory\n"
    )
    rep = explain_text(text, source="log").report
    f = rep.first_cause
    assert f is not None and f.id == "nixl-plugin-not-loaded" and f.role == "warning"
    assert "harmless unless" in f.cause and "UCX" in f.cause


def test_the_plugin_message_levels_said_are_nixls_own():
    import gzip
    import json
    from importlib import resources

    raw = resources.files("kvcheck.explain").joinpath("engine_formats.json.gz").read_bytes()
    nixl = json.loads(gzip.decompress(raw))["engines"]["nixl"]
    levels = {
        nixl["kinds"][f[2]]: [nixl["releases"][a] for a, b in f[6] for a in (a, b)]
        for f in nixl["formats"]
        if f[0] == ["Failed to load plugin from ", ": ", ""]
    }
    assert levels["log:error"][-1] == "0.7.0" and levels["log:info"][0] == "0.7.1"


def test_a_refused_transfer_telemetry_is_nixls_and_not_a_failed_transfer():
    text = (
        "E0801 12:00:00.000001     90 nixl_agent.cpp:1300] getXferTelemetry: cannot return values when telemetry "
        "is not enabled.\n"
        "(EngineCore pid=90) ERROR 08-01 12:00:00 [nixl_connector.py:2000] NIXL transfer failure: transfer_exception. "
        "Marking blocks as invalid\n"
    )
    rep = explain_text(text, source="log").report
    f = rep.first_cause
    assert f is not None and f.id == "nixl-xfer-telemetry-not-enabled" and f.engine == "nixl"
    assert "1.3.2" in f.fix
    assert not any(x.kind == "catalog" and x.engine == "sglang" for x in rep.findings)


def test_mori_dropping_the_decodes_abort_is_sglangs_and_names_the_release_that_handles_it():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    mori = Path(spec.origin).parent.joinpath("srt", "disaggregation", "mori", "conn.py").read_text(encoding="utf-8")
    assert "Received malformed bootstrap message" in mori and "def _handle_abort_message" in mori
    rep = explain_text("[2026-08-01 10:00:00 TP0] Received malformed bootstrap message\n", source="log").report
    f = rep.first_cause
    assert f is not None and f.id == "sglang-mori-abort-dropped-as-malformed" and f.engine == "sglang"
    assert "0.5.19" in f.fix


@pytest.mark.parametrize("errno_", [22, 14])
def test_a_gpu_registration_refusal_names_vmm_memory_before_a_missing_peermem(errno_):
    import os

    text = (
        f"E0819 10:00:00.000001  77 rdma_context.cpp:588] Failed to register memory 0x12300000000: "
        f"{os.strerror(errno_)} [{errno_}]\n"
    )
    f = explain_text(text, source="log").report.first_cause
    assert f is not None and f.id == "mooncake-gpu-memory-registration"
    assert f.cause.index("expandable_segments") < f.cause.index("nvidia_peermem")
    assert f.fix.index("expandable segments") < f.fix.index("nvidia_peermem")
