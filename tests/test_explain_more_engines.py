"""kvcheck explain on the second round of collected failures (issue 20): install and
packaging mismatches of NIXL, RDMA resources and NIC faults under Mooncake, the MORI IO
engine's control plane and SGLang's MORI backend refusals, TensorRT-LLM messages that
print without their prefix, and Dynamo's vLLM worker (its ``engine.py:NNN]`` lines).

Every excerpt is written here in the format its project prints (rewritten: other hosts,
numbers and ids); no collected log is pasted. Where SGLang prints the text, the test
builds it from the installed SGLang's own source (``inspect.getsource``), so the
signature is checked against the runtime's format string, not against a copy.
"""

from __future__ import annotations

import inspect
import re

import pytest

from kvcheck.explain import explain_text
from kvcheck.explain.signatures import load_signatures, signature


def _report(text: str):
    return explain_text(text, source="log").report


def _first(text: str):
    f = _report(text).first_cause
    assert f is not None, text
    return f


# ------------------------------------------------------------------ packaging and install

@pytest.mark.parametrize("text, sig, phase", [
    ("RuntimeError: No plugins available for NIXL, cannot start transfers!\n", "nixl-no-plugins-loaded", "startup"),
    (("E0412 nixl_agent.cpp:265] getPluginParams: backend 'UCX' not found\n"
     "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: status == NIXL_SUCCESS (/src/cpp/transferAgent.cpp:654)\n"),
     "nixl-backend-plugin-not-found", "startup"),
    ("TypeError: nixl_agent_config.__init__() got an unexpected keyword argument 'num_threads'\n", "nixl-too-old-for-engine", "startup"),
    # the package is named only from the log's evidence: NIXL's import, or nothing
    ("    from nixl._bindings import nixlAgent\nImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n", "nixl-cuda-major-wheel-mismatch", "startup"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n", "cuda-major-wheel-mismatch", "startup"),
    ("request to allocate mask for invalid number: Invalid argument\n", "nixl-libfabric-plugin-no-efa", "startup"),
    (("ibv_reg_dmabuf_mr(address=0x7e0000000000, length=8192, ...) failed: Unknown error 524\n"
     "UCX ERROR failed to register address 0x7e0000000000 (cuda) length 8192 dmabuf_fd 41 on md[3]=mlx5_3: Input/output error\n"),
     "ucx-dmabuf-registration-failed", "startup"),
    ("ibv_query_port_speed(mlx5_1:1/IB, port_num=1) failed: Protocol not supported\n", "rdma-core-userspace-kernel-mismatch", "startup"),
])
def test_install_and_packaging_mismatches_are_named(text, sig, phase):
    f = _first(text)
    assert (f.id, f.phase) == (sig, phase)
    assert f.cause and f.fix and f.checks


def test_a_plugin_missing_in_trtllm_is_the_conflicting_nixl_not_the_generic_assert():
    rep = _report("E0412 nixl_agent.cpp:265] getPluginParams: backend 'UCX' not found\n"
                  "RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: status == NIXL_SUCCESS (transferAgent.cpp:654)\n")
    ids = [f.id for f in rep.findings]
    assert "trtllm-nixl-agent-assert" not in ids  # suppressed by the specific one
    assert rep.first_cause.values.get("backend") == "UCX"


# ------------------------------------------------------------------ Mooncake transfer engine

@pytest.mark.parametrize("text, sig", [
    ("#0  __memcpy_avx512_unaligned_erms ()\n#1  mooncake::MemcpyWorkerPool::workerThread ()\n    from /venv/site-packages/mooncake/store.so\n#2  start_thread\n",
     "mooncake-memcpy-pool-cross-process"),
    ("E0611 14:02:03.120000 2201 worker_pool.cpp:245] Worker: Cannot make connection for endpoint: 10.1.2.3:16001@mlx5_7, mark it inactive\n",
     "mooncake-wrong-ib-device"),
    ("E0611 14:02:03.120000 2201 rdma_endpoint.cpp:70] Failed to create QP: Cannot allocate memory [12]\n", "mooncake-qp-allocation-exhausted"),
    (("W0301 08:00:01.000001     9 rdma_context.cpp:581] No suitable GID found on mlx5_bond_3/\n"
     "E0301 08:00:01.000002     9 rdma_context.cpp:81] Failed to open device mlx5_bond_3 on port  with GID -1\n"
     "E0301 08:00:01.000003     9 rdma_transport.cpp:662] RdmaTransport: No available RNIC\n"), "mooncake-gid-selection-failed"),
])
def test_mooncake_engine_failures_map_to_their_signature(text, sig):
    f = _first(text)
    assert f.id == sig and f.issues


def test_the_memcpy_pool_crash_names_its_fixing_release():
    f = _first("#1  mooncake::MemcpyWorkerPool::workerThread ()\n")
    assert f.fixed_in == "mooncake-transfer-engine 0.3.11.post1"


def test_the_rail_failover_warning_is_not_a_failed_connection():
    # releases with peer-rail failover print the same words as a WARNING and retry
    rep = _report("W0611 14:02:03.120000 2201 worker_pool.cpp:477] Worker: Cannot make connection for endpoint: "
                  "10.1.2.3:16001@mlx5_2, pausing peer rail and retrying through an alternate peer RNIC\n")
    assert "mooncake-wrong-ib-device" not in [f.id for f in rep.findings]


def test_one_local_nic_failing_its_retries_is_named_over_the_decode_timeout():
    text = ("E0623 09:10:11.000001 9001 worker_pool.cpp:294] Worker: Process failed for slice (opcode: 1, local_nic: rdma3, "
            "peer_nic: 10.2.0.9:15001@rdma1, retry_cnt: 2): transport retry counter exceeded\n")
    f = _first(text)
    assert f.id == "mooncake-retry-exceeded-local-nic" and f.process == "prefill"


def test_decode_peer_gone_is_a_consequence_pointing_to_the_peer():
    lines = "".join(f"W0904 10:52:53.0477{i:02d}     512 ucx_utils.cpp:62] Unexpected UCX error: Request canceled\n" for i in range(5))
    rep = _report(lines)
    f = next(f for f in rep.findings if f.id == "nixl-ucx-requests-canceled")
    assert f.role == "consequence" and "peer" in f.cause


# ------------------------------------------------------------------ MORI

def test_the_mori_control_plane_assert_is_moris_and_named():
    rep = _report("ControlPlaneServer::BuildRdmaConn(...): assert(hdr.type == MessageType::RegEndpoint)\n")
    assert [e.engine for e in rep.engines] == ["mori"]
    assert rep.first_cause.id == "mori-control-plane-regendpoint-assert" and rep.first_cause.phase == "first-request"


def _mori_source() -> str:
    """The installed SGLang's MORI backend source (read as text: importing it needs the
    ``mori`` package, which only AMD images have)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "srt" / "disaggregation" / "mori" / "conn.py"
    if not path.exists():
        pytest.skip("this SGLang has no MORI backend")
    return path.read_text()


def test_sglang_mori_swa_refusal_is_read_from_the_runtimes_format_string():
    src = _mori_source()
    # the f-string as SGLang's MoriKVManager raises it, filled the way Python formats it
    m = re.search(r'f"(PD state transfer does not support TP-mismatched non-MLA SWA models )"\s*f"(\(prefill_tp_size=)\{self\.attn_tp_size\}(, decode_tp_size=)\{peer_info\.decode_tp_size\}(\))"', src)
    assert m, "the MORI SWA refusal text moved in the installed SGLang"
    msg = m.group(1) + m.group(2) + "2" + m.group(3) + "4" + m.group(4)
    text = f"[2026-06-02 11:00:00 TP0] Unexpected transfer worker error for room 77\nRuntimeError: {msg}\n"
    f = _first(text)
    assert f.id == "mori-swa-hetero-tp-refused" and f.values == {"prefill_tp": "2", "decode_tp": "4"}
    assert "2" in f.cause and "4" in f.cause


@pytest.mark.parametrize("literal, sig", [
    ("Replicated Mamba PD state transfer currently requires ", "mori-mamba-replicated-hetero-tp"),
    ("Destination KV descriptors do not match prefill pp configuration", "mori-pp-descriptor-mismatch"),
])
def test_sglang_mori_refusals_match_the_installed_texts(literal, sig):
    src = _mori_source()
    assert literal in src
    # the message as printed: the source's adjacent literals joined
    m = re.search(re.escape(literal) + r'(?:"\s*")?([^"]*)"', src)
    msg = literal + (m.group(1) if m else "")
    assert _first(f"RuntimeError: {msg}\n").id == sig


def test_mori_pp_refusal_names_the_state_type():
    src = _mori_source()
    assert "MORI PD disaggregation requires PP=1 for {state_type}; " in src
    f = _first("RuntimeError: MORI PD disaggregation requires PP=1 for qsa_pending; PP>1 needs peer state_layer_ids for global-layer descriptor pairing.\n")
    assert f.id == "mori-sparse-state-pp" and f.values["state"] == "qsa_pending"


# ------------------------------------------------------------------ TensorRT-LLM without its prefix

@pytest.mark.parametrize("text, sig", [
    ("Assertion failed: Disaggregated serving is not enabled, please check the configuration.\n", "trtllm-cache-transceiver-config-unset"),
    ("Disagg server does not currently support these cacheState, please check the cacheState of the context and gen executors\n",
     "trtllm-cachestate-mismatch"),
    (("Deserialization of tag dest_data_ep_2 failed\nKey dest_data_ep_2 not found or has invalid length: -1\n"
     "Failed to deserialize data rail endpoints\nNIXL_ERR_BACKEND\n"), "trtllm-nixl-libfabric-rail-mismatch"),
])
def test_trtllm_lines_without_prefix_are_trtllms_and_named(text, sig):
    rep = _report(text)
    assert rep.first_cause.id == sig
    assert "sglang" not in {e.engine for e in rep.engines}
    # nothing explained as SGLang's (a bare NIXL_ERR_BACKEND is NIXL's text, and follows)
    assert [f for f in rep.findings if f.kind == "catalog" and (f.engine == "sglang" or f.role == "cause")] == []


def test_a_bare_trtllm_assert_is_attributed_to_trtllm():
    rep = _report("Assertion failed: Disaggregated serving is not enabled, please check the configuration.\n")
    assert [e.engine for e in rep.engines] == ["trtllm"] and rep.not_sglang == ["trtllm"]


# ------------------------------------------------------------------ Dynamo

DYNAMO_V0 = (
    "Loaded nixl metadata from engine 0a0a into engine 1b1b\n"
    "ERROR 05-11 09:15:02 engine.py:244] nixlBackendError('NIXL_ERR_BACKEND')\n"
    "ERROR 05-11 09:15:02 engine.py:244] Traceback (most recent call last):\n"
    "ERROR 05-11 09:15:02 engine.py:244]   File \"/opt/dynamo/venv/lib/python3.12/site-packages/vllm/engine/multiprocessing/engine.py\", line 242, in start\n"
    "ERROR 05-11 09:15:02 engine.py:244]     self.run_engine_loop()\n"
)


def test_dynamos_engine_py_lines_are_named_as_dynamos_vllm_worker():
    rep = _report(DYNAMO_V0)
    assert "dynamo-vllm" in [e.engine for e in rep.engines] and "sglang" not in [e.engine for e in rep.engines]
    assert rep.not_sglang == ["dynamo-vllm"]
    assert [f for f in rep.findings if f.kind == "catalog"] == []


def test_plain_vllm_v0_lines_without_dynamo_stay_vllms():
    rep = _report("ERROR 05-11 09:15:02 engine.py:244] nixlBackendError('NIXL_ERR_BACKEND')\n")
    assert [e.engine for e in rep.engines] == ["vllm"]


def test_dynamo_calling_an_sglang_api_it_does_not_have_is_a_version_mismatch():
    text = ("Traceback (most recent call last):\n"
            "  File \"/usr/lib/python3.12/site-packages/dynamo/sglang/request_handlers/llm/decode_handler.py\", line 88, in generate\n"
            "    out = await self.engine.async_generate(\n"
            "TypeError: Engine.async_generate() got an unexpected keyword argument 'data_parallel_rank'\n")
    f = _first(text)
    assert f.id == "dynamo-sglang-version-mismatch" and f.values["arg"] == "data_parallel_rank"


# ------------------------------------------------------------------ SGLang releases

def test_a_receiver_init_crash_without_bootstrap_info_names_the_fixing_release():
    text = ("[2026-01-05 08:00:00 DP0 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
            "  File \"/sgl-workspace/sglang/python/sglang/srt/disaggregation/decode.py\", line 927, in process_decode_queue\n"
            "    req_conns = self.disagg_decode_prealloc_queue.pop_preallocated()\n"
            "  File \"/sgl-workspace/sglang/python/sglang/srt/disaggregation/decode.py\", line 425, in pop_preallocated\n"
            "    decode_req.kv_receiver.init(page_indices, decode_req.metadata_buffer_index)\n"
            "  File \"/sgl-workspace/sglang/python/sglang/srt/disaggregation/mooncake/conn.py\", line 1137, in init\n"
            "TypeError: 'NoneType' object is not iterable\n")
    f = _first(text)
    assert (f.id, f.fixed_in, f.process) == ("sglang-receiver-init-no-bootstrap-info", "0.5.4", "decode")


def test_the_installed_sglang_fails_the_request_instead():
    # the fix the signature names: from 0.5.4 the receiver records a failure for a missing
    # bootstrap info (0.5.23: the common receiver's send_metadata) instead of iterating None
    conn = pytest.importorskip("sglang.srt.disaggregation.common.conn")
    holders = [obj for obj in vars(conn).values() if inspect.isclass(obj) and "send_metadata" in vars(obj)]
    srcs = [inspect.getsource(c.send_metadata) for c in holders]
    assert any("bootstrap_infos is None" in s and "Could not fetch prefill parallel info from bootstrap_addr" in s for s in srcs)


def test_the_new_signatures_are_complete():
    ids = {s.id for s in load_signatures()}
    for sid in ("nixl-no-plugins-loaded", "mooncake-memcpy-pool-cross-process", "mori-control-plane-regendpoint-assert",
                "trtllm-cachestate-mismatch", "dynamo-sglang-version-mismatch", "mori-swa-hetero-tp-refused"):
        assert sid in ids
        s = signature(sid)
        assert s.cause and s.fix and s.checks and s.phase != "any"
