"""``kvcheck explain`` on messages whose meaning their project states (issue 20):
``generic.yaml`` ``known_messages`` (Mooncake's transfer engine, SGLang's PD bootstrap),
``known_crashes`` (a crash stack in a handler the project fixed), and the general rules
next to them (a NIXL plugin needing NIXL's own library, UCX's UMR QP of exported keys, GPU
memory registration refused, overlapping registrations).

Every excerpt is written for these tests in the format the project prints (glog's
``E1203 08:11:02.123456 4711 file.cpp:N]``, SGLang's ``[date] message``, faulthandler's
``File "<unknown>", line 0, in ns::f()``); a message is matched WHOLE by the format its
project's source writes (``engine_formats.json.gz`` / ``formats.json.gz``, read release by
release), never by a fragment, and the facts asserted are the projects' own: the function
that prints it, the releases that have it, the errno a field carries.
"""

from __future__ import annotations

import pytest

from kvcheck.explain.formats import load_engine_formats, load_formats, match_line
from kvcheck.explain.matcher import explain_text
from kvcheck.explain.rulebase import rules


def first(lines: list[str]):
    rep = explain_text("\n".join(lines), source="log").report
    return rep.first_cause, rep


# ------------------------------------------------------------------ the table itself


def test_every_known_message_is_a_format_its_project_prints():
    """A format in the table that no release of its project prints would never match: each
    is one of the project's own formats, read from its source."""
    for (engine, fmt), rows in rules()["_known_messages"].items():
        idx = load_formats() if engine == "sglang" else load_engine_formats()[engine]
        assert any("{}".join(f[0]) == fmt for f in idx.formats), (rows[0][1]["id"], fmt)


def test_a_fragment_of_a_known_message_is_not_that_message():
    # the words of the zero-length refusal inside another sentence: no format matches it whole
    _, other = match_line("our wrapper says zero length memory region is fine here")
    assert other is None or other.fmt != "Transfer Engine does not support zero length memory region"
    f, _ = first(["note: our wrapper says zero length memory region is fine here"])
    assert f is None or f.id != "mooncake-zero-length-region"


# ------------------------------------------------------------------ Mooncake transfer engine


def test_an_etcd_metadata_server_on_a_build_without_etcd():
    f, _ = first(
        [
            "E1203 08:11:02.123456 4711 transfer_metadata_plugin.cpp:512] Unable to find metadata storage plugin "
            "etcd with conn string: etcd://192.0.2.40:2379",
            "*** Check failure stack trace: ***",
        ]
    )
    assert f.id == "mooncake-metadata-plugin-not-built" and f.engine == "mooncake" and f.phase == "startup"
    assert "'etcd'" in f.title and "-DUSE_ETCD=ON" in f.cause
    # where Mooncake prints it, from its source
    assert "MetadataStoragePlugin::Create" in f.cause
    assert "P2PHANDSHAKE" in f.fix


def test_a_zero_length_region_refused_and_the_buffers_left_unregistered():
    f, _ = first(
        [
            "E1203 08:12:00.000001 812 transfer_engine_impl.cpp:790] Transfer Engine does not support zero length "
            "memory region",
            "E1203 08:12:09.000001 812 rdma_transport.cpp:640] Memory region not registered by any active device(s): "
            "0x7f00aa000000",
        ]
    )
    assert f.id == "mooncake-zero-length-region" and f.first_line == 1
    assert "TransferEngineImpl::registerLocalMemory" in f.cause and "hybrid" in f.cause


def test_the_tcp_transport_cannot_resolve_the_peer():
    f, _ = first(
        [
            "E1203 09:00:00.500000 99 tcp_transport.cpp:480] TcpTransport::startTransfer encountered an ASIO "
            "exception. Slice details - source_addr: 0x7e0000000000, length: 65536, opcode: 1, target_id: 3. "
            "Exception: resolve: Host not found (authoritative)"
        ]
    )
    assert f.id == "mooncake-tcp-resolve-failed" and f.phase == "first-transfer"
    assert "resolve: Host not found" in f.cause and "IPv6" in f.cause
    # another exception in the same message is not a resolver failure
    g, _ = first(
        [
            "E1203 09:00:00.500000 99 tcp_transport.cpp:480] TcpTransport::startTransfer encountered an ASIO "
            "exception. Slice details - source_addr: 0x7e0000000000, length: 65536, opcode: 1, target_id: 3. "
            "Exception: write: Broken pipe"
        ]
    )
    assert g is not None and g.id != "mooncake-tcp-resolve-failed"


def test_a_tcp_write_with_efault_wrapped_over_two_lines_is_read_whole():
    f, _ = first(
        [
            "E1203 09:10:00.000000 1234 tcp_transport.cpp:406] ClientSession::writeBody failed.",
            "    Attempt to write data 0x7e1122330000 using buffer 0x7e1122330000. Error: Bad address (value: 14)",
        ]
    )
    assert f.id == "mooncake-tcp-buffer-efault" and f.first_line == 1
    assert "0x7e1122330000" in f.cause and "GPU memory" in f.cause and "MC_TCP_ENABLE_CONNECTION_POOL" in f.cause
    # value 104 (ECONNRESET) is not the buffer kind
    g, _ = first(
        [
            "E1203 09:10:00.000000 1234 tcp_transport.cpp:406] ClientSession::writeBody failed. Attempt to write "
            "data 0x7e1122330000 using buffer 0x7e1122330000. Error: Connection reset by peer (value: 104)"
        ]
    )
    assert g is not None and g.id != "mooncake-tcp-buffer-efault"


def test_an_endpoint_torn_down_with_work_outstanding_alone_is_the_cause():
    f, _ = first(
        ["W1203 10:00:00.000000 77 rdma_endpoint.cpp:201] Outstanding work requests found, CQ will not be generated"]
    )
    assert f is not None and f.id == "mooncake-endpoint-outstanding-wr" and f.engine == "mooncake"
    assert "v0.3.11" in f.cause and "destroyed QP" in f.cause


def test_a_stale_endpoint_retired_after_the_peer_came_back():
    f, _ = first(
        [
            "W20261203 10:05:00.100000 501 workers.cpp:447] Slice 0x7c0000001000 failed: transfer timeout (software)",
            "W20261203 10:05:00.200000 502 endpoint.cpp:480] Endpoint already established with mlx5_3 of "
            "192.0.2.17:16001, retiring it for the new connection (unidirecti...",
            "E20261203 10:05:00.210000 501 workers.cpp:285] Unable to connect endpoint 192.0.2.18:16002@mlx5_1: "
            "InvalidArgument: Missing peer GID in bootstrap",
        ]
    )
    # the warning cut short in the paste is still that message (its opening, past a field)
    assert f.id == "mooncake-stale-endpoint-after-peer-restart" and f.first_line == 2
    assert "192.0.2.17:16001" in f.cause and f.phase == "after-peer-restart"


def test_an_empty_roce_gid_table_in_the_pods_namespace():
    f, _ = first(
        [
            "E1203 11:00:00.000000 42 rdma_context.cpp:450] Failed to query GID 3 on mlx5_2/1: No data available [61]",
            "E1203 11:00:00.000100 42 transfer_engine.cpp:120] Mooncake Transfer Engine initialization failed",
        ]
    )
    assert f.id == "mooncake-gid-query-enodata" and f.phase == "startup"
    assert "mlx5_2" in f.cause and "network namespace" in f.cause and "hostNetwork" in f.fix
    # the same message with another errno is not an empty table
    g, _ = first(
        ["E1203 11:00:00.000000 42 rdma_context.cpp:450] Failed to query GID 3 on mlx5_2/1: Invalid argument [22]"]
    )
    assert g is None or g.id != "mooncake-gid-query-enodata"


def test_a_crash_in_a_tcp_session_handler_is_the_fixed_mooncake_bug():
    f, rep = first(
        [
            "!!!!!!! Segfault encountered !!!!!!!",
            'File "<unknown>", line 0, in mooncake::Session::readBody()::{lambda(std::error_code const&, unsigned '
            "long)#1}::operator()(std::error_code const&, unsigned long) const",
            'File "<unknown>", line 0, in asio::detail::read_op<asio::basic_stream_socket<asio::ip::tcp>>::operator()',
            'File "<unknown>", line 0, in asio::detail::scheduler::run(std::error_code&)',
        ]
    )
    assert f.id == "mooncake-tcp-session-crash" and f.engine == "mooncake"
    assert "mooncake::Session::readBody" in f.title and "v0.3.9" in f.cause and "v0.3.12" in f.fix
    # the bare fault header says less than the stack: it is not the first cause
    assert all(x.id != "python-segfault-generic" for x in rep.findings)


def test_overlapping_ranges_of_one_allocation():
    f, _ = first(
        [
            "E1203 12:00:00.000000 9 transfer_engine_impl.cpp:770] Transfer Engine does not support overlapped memory region"
        ]
    )
    assert f.id == "mooncake-overlapped-region-0312" and "coalesce" in f.fix and "one backing" in f.cause


# ------------------------------------------------------------------ SGLang's PD bootstrap


def test_the_decode_cannot_reach_the_prefill_bootstrap_server():
    f, rep = first(
        [
            "[2026-02-03 10:00:00 DP0 TP0] Error fetching prefill parallel info from bootstrap: ",
            "HTTPConnectionPool(host='192.0.2.9', port=9100): Max retries exceeded with url: /route?engine_rank=-1 ",
            "(Caused by NewConnectionError(\"HTTPConnection(host='192.0.2.9', port=9100): Failed to establish a new "
            'connection: [Errno 111] Connection refused"))',
        ]
    )
    assert f.id == "sglang-bootstrap-unreachable" and f.engine == "sglang" and f.phase == "first-request"
    # where SGLang logs it and the releases that have the text (0.5.10 renamed it)
    assert "_get_prefill_parallel_info_from_server" in f.cause and "0.5.9" in f.cause
    assert "--host 0.0.0.0" in f.fix and "--disaggregation-bootstrap-port" in f.fix
    assert rep.release.candidates and rep.release.candidates[-1] == "0.5.9"


# ------------------------------------------------------------------ NIXL / UCX / RDMA registration


def test_a_nixl_plugin_needing_nixls_own_library():
    f, _ = first(
        [
            "E0102 03:04:05.678901 321 nixl_plugin_manager.cpp:123] Failed to load plugin from "
            "/venv/lib/python3.12/site-packages/.nixl.mesonpy.libs/plugins/libplugin_GDS_MT.so: libplugin_GDS.so: "
            "cannot open shared object file: No such file or directory"
        ]
    )
    assert f.id == "nixl-plugin-dependency-not-found" and f.engine == "nixl" and f.phase == "startup"
    assert "0.5.0" in f.cause and "LD_LIBRARY_PATH" in f.fix
    # a CUDA library missing stays the CUDA-build kind
    g, _ = first(
        [
            "E0102 03:04:05.678901 321 nixl_plugin_manager.cpp:123] Failed to load plugin from "
            "/opt/nixl/plugins/libplugin_UCX.so: libcudart.so.13: cannot open shared object file: No such file or "
            "directory"
        ]
    )
    assert g.id == "native-plugin-missing-library" and "CUDA" in g.cause


def test_the_umr_qp_of_exported_keys_names_gga():
    f, _ = first(
        ["ib_mlx5dv_md.c:1100 UCX  ERROR mlx5_4: ibv_modify_qp(UMR QP 0x1a2b) failed to modify to RTR: No such device"]
    )
    assert f.id == "ucx-device-qp-unusable" and "UCX_TLS" in f.cause and "UCX_TLS=^gga" in f.fix
    # the function that prints it, from UCX's source
    _, fm = match_line("mlx5_4: ibv_modify_qp(UMR QP 0x1a2b) failed to modify to RTR: No such device")
    assert fm is not None and fm.function == "uct_ib_mlx5_devx_umr_modify_qp"


@pytest.mark.parametrize("errno,name", [("22", "EINVAL"), ("14", "EFAULT")])
def test_gpu_memory_registration_refused_names_the_peer_memory_modules(errno, name):
    text = {"22": "Invalid argument", "14": "Bad address"}[errno]
    f, _ = first([f"[mori][error] RegisterRdmaMemoryRegion failed! addr:0x7f1, size:1048576, errno:{errno} ({text})"])
    assert f.id == "rdma-register-gpu-memory" and name in f.title
    assert "amdgpu_peermem" in f.cause and "dma-buf" in f.cause


def test_a_mooncake_bridge_interface_is_said_as_a_warning_only_for_a_bridge():
    f, _ = first(
        [
            "I1203 13:00:00.000100 61 transfer_metadata_plugin.cpp:1127] Found active interface docker0 with IP "
            "172.30.0.1",
            "I1203 13:00:00.000200 61 transfer_metadata_plugin.cpp:1127] Found active interface ens5 with IP 192.0.2.5",
        ]
    )
    assert f.id == "mooncake-bridge-interface-address" and f.role == "warning" and "docker0" in f.title
    assert "MC_TCP_BIND_ADDRESS" in f.cause + f.fix
    g, _ = first(
        ["I1203 13:00:00.000200 61 transfer_metadata_plugin.cpp:1127] Found active interface ens5 with IP 192.0.2.5"]
    )
    assert g is None or g.id != "mooncake-bridge-interface-address"


def test_the_mamba_speculative_radix_refusal_names_the_pd_decode_order():
    # SGLang 0.5.10 .. 0.5.13.post1 raise this in ServerArgs._handle_mamba_radix_cache
    line = (
        "ValueError: Speculative decoding for FalconH1ForCausalLM is not compatible with radix cache when using "
        "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
        "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
    )
    f, rep = first([line])
    assert f.id == "sglang-mamba-spec-radix-refusal" and f.engine == "sglang" and f.phase == "startup"
    assert "FalconH1ForCausalLM" in f.title and "0.5.11" in f.cause and "--disable-radix-cache" in f.fix
    fm = load_formats().match(line.split(": ", 1)[1])
    assert fm is not None and fm.function == "ServerArgs._handle_mamba_radix_cache"
    assert "0.5.10" in fm.releases and "0.5.23" not in fm.releases


def test_a_wire_error_followed_by_rebuilt_connections_is_a_reconnect_loop():
    lines = ["[Tue Mar  3 09:00:00 2026] mlx5_7/1: QP 4242 error: local length error (0x8e 0x0 0x0)"]
    lines += [
        f"W0303 09:0{i}:00.000000 88 rdma_endpoint.cpp:692] Re-establish connection: EndPoint: local "
        f"node-a:13001@mlx5_7, peer node-b:13002@mlx5_{i}"
        for i in range(3)
    ]
    f, _ = first(lines)
    assert f.id == "rdma-wc-loc-len-err" and "rebuilt 3 times (lines 2..4)" in f.cause and "reconnect loop" in f.cause
    assert "PR #3387" in f.cause  # the rebuilds are Mooncake's (its rdma_endpoint's words)
    # two rebuilds are not a loop
    g, _ = first(lines[:3])
    assert "reconnect loop" not in g.cause


def test_a_refused_mooncake_handshake_says_nothing_listens_at_the_peer():
    f, _ = first(
        [
            "E0310 08:00:01.000001 3131 transfer_metadata_plugin.cpp:909] SocketHandShakePlugin: connect()"
            "192.0.2.31:17001: Connection refused [111]",
            "E0310 08:00:01.000050 3131 transfer_task.cpp:572] Failed to open segment for endpoint='192.0.2.31:17001'",
        ]
    )
    assert f.id == "mooncake-handshake-refused" and f.first_line == 1
    assert "192.0.2.31:17001" in f.title and "not up yet" in f.cause and "SocketHandShakePlugin" not in f.fix
    # another errno of the same message is not a refusal
    g, _ = first(
        [
            "E0310 08:00:01.000001 3131 transfer_metadata_plugin.cpp:909] SocketHandShakePlugin: connect()"
            "192.0.2.31:17001: No route to host [113]"
        ]
    )
    assert g is not None and g.id != "mooncake-handshake-refused"


def test_mooncake_nvlink_address_not_found_in_its_own_words_names_host_memory():
    # NvlinkTransport prints the range: "Requested address <from> to <to> not found!"
    f, _ = first(
        [
            "E0311 10:00:00.000001 77 nvlink_transport.cpp:497] Requested address 0x7f3a00000000 to 0x7f3a00100000 "
            "not found!"
        ]
    )
    assert f.id == "mooncake-nvlink-fallback-address" and "pinned CPU" in f.cause and "RDMA" in f.cause
