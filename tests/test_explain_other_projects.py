"""``kvcheck explain`` on the lines of the projects next to SGLang (issue 20): vLLM, vLLM-Ascend,
LMCache, Dynamo's Python workers, NIXL, UCX and Mooncake, each read by the message formats of
its own source (``engine_formats.json.gz``, ``scripts/gen_engine_formats.py``), and the
general rules over what the node allows (UCX transports, RDMA completions, kernel modules,
libfabric, NATS, Kubernetes RBAC).

Every excerpt is written for these tests in the format the project prints (vLLM's
``ERROR mm-dd hh:mm:ss [file.py:N]`` prefix, glog, UCX's ``file.c:N  UCX  ERROR``,
libfabric's ``libfabric:pid:ts::prov:subsys:func():N<level>``, faulthandler); the facts
asserted are the projects' own: the function that prints a message and the releases that
have it (their source, release by release), the meaning of a status or errno (their
headers and ``ucs_status_string``).
"""

from __future__ import annotations

import pytest

from kvcheck.explain.formats import load_engine_formats, match_line, whose
from kvcheck.explain.matcher import explain_text
from kvcheck.explain.prefixes import strip_collector


def first(lines: list[str]):
    rep = explain_text("\n".join(lines), source="log").report
    return rep.first_cause, rep


# ------------------------------------------------------------------ whose message (formats)


def test_a_vllm_connector_message_is_vllms_with_its_function_and_releases():
    # vLLM's NixlConnectorWorker._get_new_notifs logs this at error level (vllm 0.10.1.1 onwards)
    fm = whose(
        "Potentially invalid KV blocks for unrecognized request cmpl-7 were"
        " retrieved by a decode worker. They may have expired."
    )
    assert fm is not None and fm.engine == "vllm"
    assert fm.function == "NixlConnectorWorker._get_new_notifs" and fm.level == "error"
    assert "0.8.5" not in fm.releases and "0.11.0" in fm.releases


def test_a_nixl_native_line_is_nixls_and_names_its_api_function():
    # nixl_agent.cpp: NIXL_ERROR_FUNC prints the function's name first
    _, fm = match_line(
        "E0101 00:00:00.000000 1 nixl_agent.cpp:545] registerMem: registration"
        " failed for the specified or all potential backends"
    )
    assert fm is not None and fm.engine == "nixl" and fm.function == "nixlAgent::registerMem" and fm.same_file


def test_the_file_a_glog_line_names_ranks_its_own_project_first():
    # "Failed to modify QP to RTR" is printed by Mooncake's rdma_endpoint.cpp and NIXL's gpunetio plugin
    _, fm = match_line(
        "E0101 00:00:00.000 7 rdma_endpoint.cpp:400] [Handshake] Failed to modify QP to RTR,"
        " check mtu, gid, peer lid, peer qp num: Connection timed out [110]"
    )
    assert fm is not None and fm.engine == "mooncake" and fm.module.endswith("rdma_endpoint.cpp")


def test_a_message_cut_short_in_the_paste_is_matched_by_its_opening():
    # vLLM's handshake raises a long RuntimeError; a paste keeps its first sentences only
    _, fm = match_line(
        "NIXL compatibility hash mismatch. Local: abc, Remote: def. Prefill"
        " and decode instances have incompatible configurations."
    )
    assert fm is not None and fm.engine == "vllm" and fm.truncated and fm.exception_type == "RuntimeError"


def test_the_interpreters_own_wording_is_nobodys_format():
    # Mooncake's __getattr__ re-raises CPython's AttributeError text: it is not Mooncake's message
    sg, fm = match_line("'mooncake.store.MooncakeDistributedStore' object has no attribute 'batch_put_x'")
    assert sg is None and fm is None


def test_status_codes_are_read_from_the_projects_source():
    codes = load_engine_formats()["mooncake"].codes
    assert codes["NO_AVAILABLE_HANDLE"][0] == "-200" and "insufficient space" in codes["NO_AVAILABLE_HANDLE"][1]
    assert load_engine_formats()["ucx"].codes["UCS_ERR_ALREADY_EXISTS"][0] == "Element already exists"


def test_a_store_status_code_says_what_it_means():
    f, _ = first(["E0101 00:00:00.000 9 client.cpp:170] Failed to start put operation: NO_AVAILABLE_HANDLE"])
    assert f is not None and "NO_AVAILABLE_HANDLE" in f.title and "global_segment_size" in f.cause


# ------------------------------------------------------------------ levels, classes, knobs


def test_the_lines_own_level_picks_the_format_and_the_knob_it_prints_is_said():
    # vLLM-Ascend logs this text at error level in mooncake_connector.py (and at info in its
    # hybrid connector): the ERROR prefix decides; the timeout is VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT
    f, rep = first(
        [
            "(Worker_TP0 pid=9) ERROR 01-01 00:00:00 [mooncake_connector.py:236] Force freed expired request: "
            "req-1. Reason: Request exceeded timeout threshold (30 seconds). Action: Resources have been "
            "forcibly released to prevent memory leak."
        ]
    )
    assert f is not None and f.id == "kv-freed-before-read" and f.engine == "vllm-ascend"
    assert "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT=30" in f.cause
    assert all(e.engine != "sglang" for e in rep.engines)


def test_a_warning_is_the_cause_only_where_the_log_shows_no_error():
    # vLLM's EngineCore warns when a request carries kv_transfer_params and no connector is set
    f, _ = first(
        [
            "WARNING 01-01 00:00:00 [core.py:244] Got kv_transfer_params, but no"
            " KVConnector found. Disabling KVTransfer for this request."
        ]
    )
    assert f is not None and f.role == "warning" and f.engine == "vllm"


# ------------------------------------------------------------------ UCX transports and the node


@pytest.mark.parametrize(
    "line,rule",
    [
        (
            "[1.0] [h:1:0]   cma_ep.c:81   process_vm_readv(pid=7"
            " {0x1,64}-->{0x2,64}) returned -1: Operation not permitted",
            "ucx-cma-ptrace-denied",
        ),
        (
            "mm_posix.c:445  UCX  ERROR Error returned from open in attach."
            " Permission denied. File name is: /proc/77/fd/9",
            "ucx-posix-proc-link-denied",
        ),
        (
            "[1.0]  sys.c:915  UCX  ERROR   shmget(size=4096 flags=0x7b0) for mm_recv_desc failed:"
            " No space left on device, please check shared memory limits by 'ipcs -l'",
            "ucx-sysv-shm-limits",
        ),
        (
            "[1.0] [h:1:0]  mm_posix.c:88   UCX  ERROR Not enough memory to write total of 4096 bytes. Please"
            " check that /dev/shm or the directory you specified has more available memory.",
            "ucx-dev-shm-too-small",
        ),
        (
            "ib_mlx5_dv.c:161  UCX  ERROR   mlx5dv_devx_obj_create(QP) failed, syndrome 0: Cannot allocate memory",
            "ucx-qp-create-exhausted",
        ),
        (
            "cuda_ipc_cache.c:154  UCX Fatal: dev:0: failed to open ipc mem"
            " handle. addr:0x7f00 len:4096 (Element already exists)",
            "ucx-cuda-ipc-already-mapped",
        ),
    ],
)
def test_ucx_transport_failures_are_what_the_node_allows(line, rule):
    f, _ = first([line])
    assert f is not None and f.id == rule and f.engine == "ucx" and f.fix


def test_libfabric_registration_with_dmabuf_on_says_the_dmabuf_path_was_not_taken():
    f, rep = first(
        [
            "libfabric:1:1700000000::core:core:fi_param_get_():399<info> read bool var hmem_cuda_use_dmabuf=1",
            "libfabric:1:1700000000::efa:mr:efa_mr_reg_impl():893<warn>"
            " Unable to register MR of 4096 bytes: Bad address",
        ]
    )
    assert f is not None and f.id == "rdma-register-gpu-memory" and "EFAULT" in f.title
    assert "dma-buf registration of GPU memory enabled" in f.cause and f.engine == "libfabric"


@pytest.mark.parametrize(
    "line,sig",
    [
        (
            "[100.1] nv_peer_mem: disagrees about version of symbol ib_register_peer_memory_client",
            "kernel-module-symbol-version",
        ),
        ('Assertion "(gdr_pin_buffer(g, p, n, 0, 0, &mh)) == (0)" failed at sanity.cpp:10', "gdrcopy-pin-failed"),
        ("maximum payload exceeded: 2000000 vs 1048576", "nats-max-payload"),
        (
            '{"level":"error","error":"roles.x.io is forbidden: User'
            ' \\"system:serviceaccount:ns:ctl\\" cannot create resource \\"roles\\" in API group \\"x.io\\""}',
            "k8s-rbac-forbidden",
        ),
        (
            "nccl_net_ofi_init:100 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available",
            "ofi-getinfo-no-device",
        ),
    ],
)
def test_the_stack_next_to_the_transfer_says_its_documented_meaning(line, sig):
    f, _ = first([line])
    assert f is not None and f.id == sig


def test_a_completion_error_after_a_reconnect_says_the_reconnect():
    f, _ = first(
        [
            "W0101 00:00:00.000 rdma_endpoint.cpp:325] Re-establish"
            " connection: EndPoint: local a@mlx5_0, peer b@mlx5_1",
            "E0101 00:00:01.000 worker_pool.cpp:297] Process failed for slice"
            " (retry_cnt: 0): transport retry counter exceeded",
        ]
    )
    assert f is not None and "re-established" in f.cause and "reconnect race" in f.cause


# ------------------------------------------------------------------ crashes


def test_a_ucx_backtrace_says_what_the_process_was_doing():
    f, _ = first(
        [
            "[h:1:0:1] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x28)",
            "==== backtrace ====",
            "    0  /opt/ucx/lib/libucs.so.0(+0x23f34) [0x2af2ba456f34]",
            "    1  /opt/ucx/lib/libucp.so.0(ucp_rkey_destroy+0x10) [0x2af2b9bf9639]",
            "    2  /opt/ucx/lib/libucp.so.0(ucp_rndv_progress_rma_get_zcopy+0x1fc) [0x2af2b9c34c4c]",
            "    3  /opt/ucx/lib/libucp.so.0(ucp_worker_progress+0x145) [0x2af2b9bff3c9]",
        ]
    )
    assert f is not None and f.id == "native-crash-generic" and f.engine == "ucx"
    assert "ucp_rkey_destroy" in f.title and "moving data" in f.title and f.phase == "first-transfer"


def test_native_frames_of_a_python_fault_dump_name_the_library():
    f, _ = first(
        [
            "!!!!!!! Segfault encountered !!!!!!!",
            '  File "<unknown>", line 0, in mooncake::RdmaEndPoint::submitPostSend()',
            '  File "<unknown>", line 0, in asio::detail::scheduler::run()',
        ]
    )
    assert f is not None and f.id == "native-crash-generic" and "submitPostSend" in f.title and f.engine == "mooncake"


def test_a_crash_right_after_an_error_line_follows_from_it():
    f, rep = first(
        [
            "E0101 00:00:00.000 7 rdma_context.cpp:116] Failed to create completion queue: Cannot allocate memory [12]",
            "W0101 00:00:00.001 7 rdma_transport.cpp:423] Disable device mlx5_3",
            "Fatal Python error: Segmentation fault",
        ]
    )
    assert f is not None and f.first_line == 1 and any("segfault" in t.id for t in rep.then)


# ------------------------------------------------------------------ Python exceptions


def test_an_attribute_missing_on_another_packages_object_is_a_release_mismatch():
    f, _ = first(
        [
            "[2026-01-01 00:00:00,000] LMCache ERROR: get failed: 'mooncake.store.MooncakeDistributedStore' object "
            "has no attribute 'batch_get_x' (connector.py:10:lmcache.v1.connector)"
        ]
    )
    assert f is not None and f.id == "api-version-mismatch" and "mooncake" in f.title and "batch_get_x" in f.title


def test_an_index_past_a_config_list_by_rank_is_a_list_shorter_than_the_ranks():
    f, _ = first(
        [
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.12/site-packages/lmcache/v1/worker.py", line 96, in __init__',
            "    port = config.worker_ports[self.worker_id]",
            "IndexError: list index out of range",
        ]
    )
    assert f is not None and f.id == "config-list-shorter-than-ranks" and "worker_ports" in f.title


def test_a_shared_library_the_loader_cannot_find_names_the_loader_path():
    f, _ = first(["ImportError: ascend_transport.so: cannot open shared object file: No such file or directory"])
    assert f is not None and f.id == "native-library-missing" and "LD_LIBRARY_PATH" in f.cause and "mooncake" in f.cause


def test_a_lone_exception_of_another_project_is_said_to_be_its():
    f, _ = first(
        [
            "RuntimeError: NIXL compatibility hash mismatch. Local: a, Remote: b."
            " Prefill and decode instances have incompatible configurations."
        ]
    )
    assert f is not None and f.engine == "vllm" and "vLLM's own" in f.cause


def test_jetstream_unavailable_is_nats_without_jetstream():
    f, _ = first(
        [
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.12/site-packages/nats/js/manager.py", line 417, in _api_request',
            "    raise ServiceUnavailableError",
            "nats.js.errors.ServiceUnavailableError: nats: ServiceUnavailableError: code=None",
        ]
    )
    assert f is not None and f.id == "nats-jetstream-unavailable" and "-js" in f.fix


# ------------------------------------------------------------------ collectors' prefixes


@pytest.mark.parametrize(
    "line,rest,role",
    [
        ("decode_0.log:ERROR 01-01 00:00:00 [x.py:1] m", "ERROR 01-01 00:00:00 [x.py:1] m", "decode"),
        ("[PYTHON3] Traceback (most recent call last):", "Traceback (most recent call last):", ""),
        ('│   File "/x.py", line 2, in f     │', '  File "/x.py", line 2, in f', ""),
    ],
)
def test_grep_launcher_and_terminal_frame_prefixes_come_off(line, rest, role):
    assert strip_collector(line) == (rest, role)


# ------------------------------------------------------------------ classes of messages


def test_a_pd_request_without_its_bootstrap_fields_points_at_the_router_in_front():
    f, _ = first(
        ['{"error": {"message": "Invalid request: Disaggregated request received without bootstrap room id."}}']
    )
    assert f is not None and f.id == "pd-request-without-bootstrap" and "router" in f.cause


def test_a_traceback_cut_after_its_raise_reads_the_raise():
    f, _ = first(
        [
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.12/site-packages/dynamo/'
            'trtllm/handler_base.py", line 600, in generate_locally',
            '    raise ValueError("Disaggregated params are required for decode mode")',
        ]
    )
    assert f is not None and f.id == "decode-without-prefill-params" and f.engine == "dynamo"


def test_an_unmodeled_processs_warning_is_said_as_its_own_words():
    # Dynamo's Rust runtime (tracing format): kvcheck has no formats for it and says so
    f, _ = first(["2026-01-01T00:00:00.000Z  WARN dynamo_llm::discovery: KV Router block size mismatch! 16 vs 64"])
    assert f is not None and f.role == "warning" and f.engine == "dynamo" and "no message formats for Dynamo" in f.cause


def test_the_rbac_rule_names_the_verb_and_resource_refused():
    f, _ = first(['E forbidden: User "system:serviceaccount:ns:ctl" cannot patch resource "leases" in API group "x"'])
    assert f is not None and f.id == "k8s-rbac-forbidden" and "patch on leases" in f.cause


def test_a_libfabric_error_code_is_read_as_its_errno():
    f, _ = first(["Libfabric error: (-12) Cannot allocate memory"])
    assert f is not None and f.id == "os-enomem" and "locked memory" in f.cause


@pytest.mark.parametrize(
    "line,cls,engine",
    [
        # UCX's ucs_check_cpu_flags prints it to stderr before the log is set up
        ("[h:1] FATAL: UCX library was compiled with avx but CPU does not support it.", "ucx-cpu-flags-missing", "ucx"),
        # UCX's ucp_address_unpack (releases 1.9 .. 1.11 print it this way)
        (
            "[1.0] [h:1:0]  address.c:917  UCX  ERROR address version mismatch: expected 0, actual 12",
            "ucx-two-versions",
            "ucx",
        ),
    ],
)
def test_a_message_class_read_from_the_projects_own_format(line, cls, engine):
    f, _ = first([line])
    assert f is not None and f.id == cls and f.engine == engine


def test_a_libfabric_stderr_message_is_libfabrics():
    # the EFA provider's efa_rdm_get_use_device_rdma prints it before abort()
    fm = whose(
        "FI_EFA_USE_DEVICE_RDMA=1 was set by user, but EFA device has no"
        " rdma-read capability.  Application will abort()."
    )
    assert fm is not None and fm.engine == "libfabric" and fm.function == "efa_rdm_get_use_device_rdma"


def test_a_release_only_older_ucx_prints_is_said_with_its_releases():
    _, fm = match_line("[1.0] [h:1:0]  address.c:917  UCX  ERROR address version mismatch: expected 0, actual 12")
    assert fm is not None and fm.releases[0] == "v1.9.0" and "v1.15.0" not in fm.releases


_SHARED_TB = (
    "Traceback (most recent call last):\n"
    '  File ".../parallel_state.py", line 1043, in get_tp_group\n'
    "    assert _TP is not None\n"
    "AssertionError: tensor model parallel group is not initialized\n"
)


def test_a_message_sglang_and_vllm_share_under_a_cut_path_is_neither_claimed():
    """get_tp_group's 'tensor model parallel group is not initialized' is in SGLang's
    srt/distributed/parallel_state.py and vLLM's vllm/distributed/parallel_state.py alike: under a
    frame whose package the paste cut off ('.../parallel_state.py') it is said to be both; a vLLM
    process's lines make it vLLM's, an SGLang process's SGLang's."""
    from kvcheck.explain.formats import match_line

    sg, other = match_line("tensor model parallel group is not initialized")
    assert sg is not None and sg.function == "get_tp_group" and sg.module.endswith("distributed.parallel_state")
    assert other is not None and other.engine == "vllm" and other.function == "get_tp_group"
    f = explain_text(_SHARED_TB, source="log").report.first_cause
    assert f is not None and f.engine != "sglang" and "SGLang's or vLLM's" in f.title
    assert "does not show which" in f.cause
    vllm = "".join(
        f"(EngineCore_DP0 pid=7) ERROR 05-02 10:11:20 [core.py:708] {ln}\n" for ln in _SHARED_TB.splitlines()
    )
    rep = explain_text(vllm, source="log").report
    assert all(x.engine != "sglang" for x in rep.findings)
    sgl = "[2026-01-02 10:00:00 TP0] Scheduler hit an exception: " + _SHARED_TB
    f = explain_text(sgl, source="log").report.first_cause
    assert f is not None and f.engine == "sglang" and "srt/distributed/parallel_state.py" in f.cause
