"""The general machinery of ``kvcheck explain`` on log shapes no specific signature was
written for (issue 20): collectors' prefixes, tracebacks pasted from their middle, other
engines' process prefixes, node command outputs, releases named by pip, native
assertions, missing packages. Every excerpt below is written for these tests (public
formats: kubectl/docker/journald, pip, ibv_devices, ulimit, vLLM's and SGLang's log
prefixes), none is copied from a collected log."""

from __future__ import annotations

import pytest

from kvcheck.explain.matcher import explain_text
from kvcheck.explain.prefixes import strip_collector

SGLANG_TB = [
    "[2026-04-02 11:20:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 2100, in run_scheduler_process',
    "    scheduler.event_loop_normal_disagg_decode()",
    '  File "/opt/sglang/python/sglang/srt/disaggregation/decode.py", line 700, in pop_preallocated',
    "    idx = self.table[req.slot]",
    "KeyError: 'slot-17'",
]


def report(lines: list[str]):
    return explain_text("\n".join(lines), source="log").report


# ------------------------------------------------------------------ collectors' prefixes
@pytest.mark.parametrize(
    "prefix,role",
    [
        ("decode-1  | ", "decode"),  # docker compose logs
        ("2026-04-02T11:20:00.123456789Z ", ""),  # kubectl logs --timestamps
        ("Apr 02 11:20:00 gpu-7 python3[4410]: ", ""),  # journald
        ("[pod/sglang-decode-0/server] ", "decode"),  # kubectl logs --prefix
        ("> ", ""),  # a GitHub reply's quote
    ],
)
def test_collector_prefix_leaves_the_traceback_readable(prefix, role):
    rep = report([prefix + ln for ln in SGLANG_TB])
    first = rep.first_cause
    assert first is not None and first.id == "python-exception-generic"
    assert "KeyError: 'slot-17'" in first.title
    assert "disaggregation/decode.py:700 in pop_preallocated" in first.cause
    sg = next(e for e in rep.engines if e.engine == "sglang")
    if role:
        assert sg.processes.get(role)


def test_strip_collector_keeps_the_processes_own_formats():
    for line in (
        "[2026-04-02 11:20:00 TP0] Prefill batch, #new-seq: 1",
        "2025-04-26T20:46:29.907Z ERROR engine.start: failed",  # Dynamo's tracing format
        "(EngineCore_DP0 pid=12) ERROR 10-16 17:22:56 [nixl_connector.py:815] x",
        "Traceback (most recent call last):",
        "ValueError: Traceback (most recent call last): x",
        "E0402 11:20:00.000123 4410 rdma_context.cpp:120] failed",
    ):
        assert strip_collector(line) == (line, "")
    assert strip_collector("\x1b[31mERROR\x1b[0m 10-16 17:22:56 [a.py:1] x")[0].startswith("ERROR 10-16")
    assert strip_collector("[TensorRT-LLM[][ERROR[] Assertion failed")[0] == "[TensorRT-LLM][ERROR] Assertion failed"
    assert strip_collector("0: [2026-04-02 11:20:00 TP0] x")[0] == "[2026-04-02 11:20:00 TP0] x"  # srun --label
    assert strip_collector("Name: sglang")[0] == "Name: sglang"  # a label only before a log line's start


# ------------------------------------------------------------------ tracebacks pasted from their middle
def test_vllm_worker_prefix_and_headerless_assert_is_read_as_vllms():
    p = "(VllmWorker rank=1 pid=900) ERROR 05-01 10:00:00 [multiproc_executor.py:500] "
    rep = report(
        [
            p + '  File "/srv/vllm/vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py", line 900,'
            " in _read_blocks",
            p + "    assert local_blocks <= remote_blocks",
            p + "AssertionError",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.engine == "vllm"
    assert "assert local_blocks <= remote_blocks" in first.title
    assert first.phase == "first-transfer"  # _read_blocks moves KV
    assert not [f for f in rep.findings if f.kind == "catalog"]  # nothing explained as SGLang's


def test_unindented_frames_and_a_trailing_assert_statement():
    rep = report(
        [
            'File "/w/vllm/vllm/v1/core/sched/scheduler.py", line 900, in update_from_output',
            "stats = self.connector.get_kv_connector_stats()",
            'File "/w/vllm/vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py", line 240, in '
            "get_kv_connector_stats",
            "assert self.worker is not None",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.engine == "vllm" and first.phase == "serving"
    assert "AssertionError: assert self.worker is not None" in first.title


def test_lone_refusal_wrapped_over_lines_keeps_its_advice():
    rep = report(
        [
            "  NotImplementedError: The FooAttention backend does not support",
            "  sliding windows, please use the Bar backend on this GPU.",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.phase == "startup"
    assert "sliding windows" in first.title
    assert "please use the Bar backend on this GPU" in first.fix


# ------------------------------------------------------------------ cause classes
def test_missing_python_package_names_the_package_and_its_install():
    rep = report(
        [
            "Traceback (most recent call last):",
            '  File "/env/lib/python3.11/site-packages/lmcache/v1/storage_backend/nixl_store.py", line 9, in <module>',
            "    from nixl._api import nixl_agent",
            "ModuleNotFoundError: No module named 'nixl'",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "nixl-not-installed" and first.phase == "startup"
    assert "pip install nixl" in first.fix
    rep = report(["ModuleNotFoundError: No module named 'nixl._bindings'"])
    assert rep.first_cause is not None and rep.first_cause.id == "nixl-install-broken"


def test_verbs_enomem_with_ulimit_output_is_the_memlock_limit():
    rep = report(
        [
            "[1712000000.000001] [gpu-3:501  :0]        ib_iface.c:900  UCX  ERROR ibv_create_cq(cqe=8192) failed: "
            "Cannot allocate memory",
            "$ ulimit -a",
            "max locked memory       (kbytes, -l) 64",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "rdma-register-enomem" and first.phase == "startup"
    assert "ibv_create_cq" in first.title and "64 KB" in first.cause
    assert "memlock" in first.fix


def test_empty_ibv_devices_output_explains_the_request_failure_it_precedes():
    rep = report(
        [
            "[2026-04-02 11:20:00] The server is fired up and ready to roll!",
            "[2026-04-02 11:21:00] KVTransferError(bootstrap_room=1): Could not fetch prefill parallel info from "
            "bootstrap_addr: prefill-svc:8998",
            "# ibv_devices",
            "    device                 node GUID",
            "    ------              ----------------",
            "# lsmod | grep peer_mem",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "rdma-devices-not-visible" and first.precondition
    assert any(f.id == "receiver-no-prefill-info" for f in rep.then)


def test_ibv_devices_with_a_device_is_no_finding():
    rep = report(
        [
            "    device                 node GUID",
            "    ------              ----------------",
            "    mlx5_0              0c42a10300aabbcc",
        ]
    )
    assert not rep.findings


def test_a_start_up_refusal_is_not_explained_by_the_node_state():
    rep = report(
        [
            "ValueError: page_size 7 is not supported, please set --page-size to a power of two",
            "max locked memory       (kbytes, -l) 64",
        ]
    )
    assert rep.first_cause is not None and rep.first_cause.id == "python-exception-generic"


def test_native_assertion_names_library_and_start_up_from_the_constructor():
    rep = report(
        [
            "RuntimeError: [TensorRT-LLM[][ERROR[] Assertion failed: bufTokens % blockTokens == 0 "
            "(../tensorrt_llm/batch_manager/someBuffer.cpp:99)",
            "1       0x7f00 tensorrt_llm::common::throwRuntimeError(char const*, int, char const*) + 76",
            "2       0x7f01 tensorrt_llm::batch_manager::Transceiver::Transceiver(int) + 10",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "native-assertion-generic"
    assert first.engine == "trtllm" and first.phase == "startup"
    assert "bufTokens % blockTokens == 0" in first.cause


# ------------------------------------------------------------------ phases of native crashes
def test_ucx_crash_during_serving_is_a_serving_crash():
    rep = report(
        [
            "[2026-04-02 11:20:00] server_args=ServerArgs(model_path='m', disaggregation_mode='prefill', tp_size=1)",
            "[2026-04-02 11:20:40] The server is fired up and ready to roll!",
            '[2026-04-02 11:21:00] INFO:     10.0.0.2:5000 - "POST /generate HTTP/1.1" 200 OK',
            "[2026-04-02 13:00:00 TP0] Prefill batch, #new-seq: 2, #new-token: 900, #cached-token: 0, #running-req: 0",
            "[gpu-3:501:0:777] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
            "==== backtrace (tid:    777) ====",
            " 0  /opt/ucx/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7f0]",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.engine == "ucx" and first.phase == "serving"


# ------------------------------------------------------------------ releases
@pytest.mark.parametrize(
    "lines,kind",
    [
        (["$ pip show sglang", "Name: sglang", "Version: 0.5.16", "Summary: SGLang"], "pip show"),
        (["Package    Version", "---------- -------", "sgl-kernel 0.3.21", "sglang     0.5.16"], "pip list"),
        (["  Downloading sglang-0.5.16-py3-none-any.whl (3.1 MB)"], "wheel"),
        (["Successfully installed sgl-kernel-0.3.21 sglang-0.5.16 torch-2.9.1"], "wheel"),
        (['pip install "sglang[all]==0.5.16"'], "version line"),
    ],
)
def test_release_from_pip_and_wheel_lines(lines, kind):
    rel = report(lines).release
    assert rel.release == "0.5.16"
    assert any(c.kind == kind and c.value == "0.5.16" for c in rel.clues)


def test_pip_show_of_another_package_is_no_release():
    rel = report(["Name: sglang-router", "Version: 0.2.1", "Name: sgl-kernel", "Version: 0.3.21"]).release
    assert rel.release is None


# ------------------------------------------------------------------ native stacks, loaders
def test_gdb_stack_names_the_first_frame_outside_the_runtime():
    rep = report(
        [
            "(gdb) bt",
            "#0  0x00007f00 in _Unwind_GetRegionStart () from /lib/x86_64-linux-gnu/libgcc_s.so.1",
            "#1  0x00007f01 in asio::detail::do_throw_error (err=..., location=0x1 \"connect\") at /inc/asio/x.ipp:63",
            "#2  0x00007f02 in mooncake::TcpTransport::startTransfer (this=0x0, slice=0x1) at "
            "/src/transport/tcp_transport/tcp_transport.cpp:400",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "native-crash-generic" and first.engine == "mooncake"
    assert "TcpTransport::startTransfer" in first.title and "TCP transport" in first.title


def test_ucx_backtrace_names_the_transport_not_the_signal_handler():
    rep = report(
        [
            "[gpu-3:501:0:777] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
            "==== backtrace (tid:    777) ====",
            " 0  /opt/ucx/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7f0]",
            " 1  /opt/ucx/lib/libucs.so.0(+0x2f01f) [0x7f1]",
            " 2  /lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f2]",
            " 3  /opt/ucx/lib/libuct_ib.so.0(uct_rc_mlx5_ep_put_zcopy+0x1a0) [0x7f3]",
            "=================================",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "native-crash-generic" and first.engine == "ucx"
    assert "uct_rc_mlx5_ep_put_zcopy" in first.title
    assert not any(f.id == "ucx-signal-generic" for f in rep.findings)


def test_undefined_ucx_symbol_is_two_ucx_installations():
    rep = report(["ucx_info: symbol lookup error: ucx_info: undefined symbol: ucs_some_new_function"])
    first = rep.first_cause
    assert first is not None and first.id == "ucx-multiple-installations" and first.phase == "startup"


def test_missing_cuda_runtime_names_the_package_that_was_imported():
    rep = report(
        [
            ">>> from mooncake.engine import TransferEngine",
            "Traceback (most recent call last):",
            '  File "<stdin>", line 1, in <module>',
            "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
        ]
    )
    first = rep.first_cause
    assert first is not None and first.id == "mooncake-cuda-major-wheel-mismatch"
    assert "CUDA 12" in first.cause and "mooncake-transfer-engine" in first.cause


def test_sglang_rank_prefix_without_its_time_is_sglangs():
    rep = report(["[DP3 TP3 EP3 PP1] Some requests timed out when bootstrapping"])
    assert [e.engine for e in rep.engines] == ["sglang"]
