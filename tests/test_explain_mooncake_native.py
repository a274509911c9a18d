"""Mooncake's native lines explained, not only named (issue 20): the component that prints a
line, the phase its function runs in, the likely cause and the fix in Mooncake's own knobs
(``kvcheck/explain/mooncake_native``). The lines are written here in Mooncake's formats (its
glog prefix, its message text as its source writes it); the functions, files and releases
asserted are those of Mooncake's own source (``engine_formats.json.gz``, read from its
release tags), and, where a Mooncake mirror is on this machine, the source itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kvcheck.explain import explain_text
from kvcheck.explain.formats import load_engine_formats, match_line
from kvcheck.explain.mooncake_native import place, table

MIRROR = Path("/work/.mirror/kvcache-ai+Mooncake/repo")


def _report(text: str):
    rep = explain_text(text, source="log").report
    assert rep is not None
    return rep


def _first(text: str):
    f = _report(text).first_cause
    assert f is not None
    return f


def _src(tag: str, path: str) -> str:
    if not MIRROR.is_dir():
        pytest.skip("no Mooncake mirror on this machine")
    out = subprocess.run(["git", "-C", str(MIRROR), "show", f"{tag}:{path}"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"{tag}:{path} not in the mirror")
    return out.stdout


TCP_INSTALL = (
    "E0102 03:04:05.000100  77 client_service.cpp:789] tcp_transport_install_failed "
    'error_message="bind: Address already in use"\n'
)


def test_the_tcp_transport_port_was_rpc_port_plus_one_until_v035():
    # the fact the port cause rests on, in Mooncake's own TcpTransport::install
    old = _src("v0.3.4.post2", "mooncake-transfer-engine/src/transport/tcp_transport/tcp_transport.cpp")
    new = _src("v0.3.5", "mooncake-transfer-engine/src/transport/tcp_transport/tcp_transport.cpp")
    assert "int tcp_port = meta->localRpcMeta().rpc_port + 1;" in old
    assert "int tcp_port = findAvailableTcpPort(sockfd);" in new and "rpc_port + 1" not in new


def test_a_store_clients_tcp_transport_bind_failure_is_the_port_family_with_its_mechanism():
    fm = match_line(TCP_INSTALL.split("] ", 1)[1], "error", "client_service.cpp")[1]
    assert fm is not None and fm.engine == "mooncake" and fm.function == "Client::InitTransferEngine"
    f = _first(TCP_INSTALL)
    assert (f.id, f.engine, f.phase) == ("mooncake-port-in-use", "mooncake", "startup")
    assert "Store client" in f.values["component"] and "InitTransferEngine" in f.values["component"]
    assert "rpc_port + 1" in f.cause and "v0.3.5" in f.cause and "findAvailableTcpPort" in f.cause
    # Mooncake's own knobs, never SGLang's port flags
    assert "MC_" in f.fix and "--disaggregation-bootstrap-port" not in f.fix and "--port," not in f.fix


def test_a_component_and_its_functions_phase_come_from_the_source_path():
    c, ph = place(
        "mooncake-transfer-engine/src/transport/rdma_transport/rdma_endpoint.cpp", "RdmaEndPoint::deconstruct"
    )
    assert c["id"] == "rdma-endpoint" and ph == "shutdown"
    c, ph = place("mooncake-transfer-engine/src/transport/rdma_transport/worker_pool.cpp", "WorkerPool::performPollCq")
    assert c["id"] == "rdma-transport" and ph == "serving"
    c, ph = place("mooncake-transfer-engine/src/transport/tcp_transport/tcp_transport.cpp", "TcpTransport::install")
    assert c["id"] == "tcp" and ph == "startup"
    c, ph = place("mooncake-transfer-engine/src/transfer_metadata.cpp", "TransferMetadata::getSegmentDescByID")
    assert c["id"] == "metadata" and ph == "first-transfer"
    c, _ = place("mooncake-transfer-engine/tent/src/transport/rdma/context.cpp", "RdmaContext::openDevice")
    assert c["id"] == "tent-transport"
    c, _ = place("mooncake-store/src/rpc_service.cpp", "")
    assert c["id"] == "store-master"


def test_every_component_places_some_file_mooncake_prints_from():
    modules = load_engine_formats()["mooncake"].modules
    for c in table()["components"]:
        assert any(c["_path"].search(m) for m in modules), c["id"]


def test_a_line_whose_code_changed_says_the_release_and_the_shutdown_phase():
    line = "E0102 03:04:05.000200  77 rdma_endpoint.cpp:215] Failed to destroy QP: Device or resource busy [16]\n"
    fm = match_line(line.split("] ", 1)[1], "error", "rdma_endpoint.cpp")[1]
    assert fm is not None and fm.function == "RdmaEndPoint::deconstruct"
    last = fm.releases[-1]
    after = fm.all_releases[fm.all_releases.index(last) + 1]
    f = _first(line)
    assert f.engine == "mooncake" and f.phase == "shutdown"
    assert "QP handshake" in f.values["component"] and "deconstruct" in f.values["component"]
    assert f"{after} no longer prints it" in f.cause
    assert f.checks and f.fix


def test_an_unreachable_etcd_metadata_server_is_said_with_the_metadata_plugin():
    line = (
        "E0102 03:04:05.000300  77 transfer_metadata_plugin.cpp:454] EtcdStoragePlugin: unable to connect "
        "etcd://10.9.9.9:2379: error 14\n"
    )
    f = _first(line)
    assert (f.id, f.phase) == ("mooncake-peer-unreachable", "startup")
    assert "metadata server" in f.cause and "TransferEngine::init" in f.cause
    assert "segment metadata" in f.values["component"]


def test_a_ipv4_wildcard_that_does_not_resolve_is_mooncakes_rpc_layer():
    log = (
        "I0102 03:04:05.000400  88 rpc_service.cpp:251] HTTP metrics server started on port 9003\n"
        "2026-01-02 03:04:05.000500 ERROR    [88] [coro_http_server.hpp:725] bad address: 0.0.0.0 error: "
        "Host not found (authoritative)\n"
    )
    rep = _report(log)
    assert [e.engine for e in rep.engines] == ["mooncake"]
    f = rep.first_cause
    assert f is not None and (f.id, f.engine, f.phase) == ("mooncake-address-unresolvable", "mooncake", "startup")
    assert "AI_ADDRCONFIG" in f.cause and "IPv6-only" in f.cause and "mooncake_master" in f.cause
    assert "yalantinglibs" in f.values["component"]
    assert "--rpc_address" in f.fix


def test_a_coro_rpc_client_refused_by_the_master_is_the_unreachable_family():
    line = "2026-01-02 03:04:05.000600 WARNING  [91] [coro_rpc_client.hpp:989] client_id 3 failed:Connection refused\n"
    f = _first(line)
    assert (f.id, f.engine) == ("mooncake-peer-unreachable", "mooncake")
    assert "coro_rpc" in f.cause and "master" in f.cause


def test_a_mooncake_file_without_a_generic_row_is_still_its_component():
    # efa_context.cpp is in no generic.yaml row: the Mooncake layer places it
    line = "E0102 03:04:05.000700  77 efa_context.cpp:300] widget in the efa path refused the request\n"
    f = _first(line)
    assert f.engine == "mooncake" and "EFA" in f.values["component"]
    assert "fi_info -p efa" in " ".join(f.checks)


def test_an_ignored_mc_setting_is_a_warning_naming_the_variable():
    line = (
        "W0102 03:04:05.000800  77 config.cpp:237] Ignore value from environment variable MC_MTU, it should be "
        "512|1024|2048|4096\n"
    )
    rep = _report(line)
    got = [f for f in rep.then + ([rep.first_cause] if rep.first_cause else []) if f.id == "mooncake-config-ignored"]
    assert got and got[0].role == "warning" and "loadGlobalConfig" in got[0].cause


def test_mtu_cause_restates_the_endpoints_path_mtu_choice():
    src = _src("v0.3.12", "mooncake-transfer-engine/src/transport/rdma_transport/rdma_endpoint.cpp")
    assert "attr.path_mtu = context_.activeMTU();" in src
    assert "if (globalConfig().mtu_length < attr.path_mtu)" in src
    fam = table()["_families"]["mooncake-mtu-mismatch"]
    assert "MC_MTU" in fam["cause"] and "not exchanged" in fam["cause"] and "MC_MTU" in fam["fix"]


def test_no_mooncake_fix_names_an_sglang_flag():
    texts = [f["fix"] for f in table()["families"]] + [c["fix"] for c in table()["components"]]
    for t in texts:
        assert "--disaggregation" not in t and "--dist-init-addr" not in t, t


def test_a_general_rules_cause_on_a_mooncake_line_keeps_its_id_and_gains_the_component():
    line = (
        "E0102 03:04:05.000900  77 rdma_context.cpp:300] Failed to register memory 0x7f0000000000: "
        "Cannot allocate memory [12]\n"
    )
    fm = match_line(line.split("] ", 1)[1], "error", "rdma_context.cpp")[1]
    assert fm is not None and fm.function.startswith("RdmaContext::registerMemoryRegion")
    f = _first(line)
    assert f.id == "rdma-register-enomem"  # the errno rule still decides the cause
    assert "RLIMIT_MEMLOCK" in f.cause and fm.function in f.cause and "ibv_reg_mr" in f.cause
    assert "Mooncake RDMA context" in f.cause


def test_what_sets_mooncakes_settings_in_sglang_is_sglangs_own_code():
    import importlib.util

    spec = importlib.util.find_spec("sglang")  # the package only: its subpackages import torch
    assert spec is not None and spec.origin
    root = Path(spec.origin).parent / "srt"
    te = (root / "distributed" / "device_communicators" / "mooncake_transfer_engine.py").read_text(encoding="utf-8")
    assert "hostname=get_local_ip_auto()" in te and "envs.MOONCAKE_PROTOCOL.get()" in te
    net = (root / "utils" / "network.py").read_text(encoding="utf-8")
    assert 'os.getenv("SGLANG_HOST_IP", "")' in net
    pre = (root / "disaggregation" / "prefill.py").read_text(encoding="utf-8")
    assert "kv_args.ib_device = get_disagg().disaggregation_ib_device" in pre


DEVICE = (
    "E0102 03:04:05.001000  77 rdma_context.cpp:116] Failed to create completion queue: Cannot allocate memory [12]\n"
)


def test_a_mooncake_fix_names_sglangs_setting_only_in_an_sglang_process():
    bare = _first(DEVICE)
    assert bare.id == "mooncake-rdma-device-unusable" and "--disaggregation-ib-device" not in bare.fix
    log = "[2026-01-02 03:04:04] server_args=ServerArgs(model_path='m', disaggregation_mode='prefill')\n" + DEVICE
    f = _first(log)
    assert f.id == "mooncake-rdma-device-unusable"
    assert "--disaggregation-ib-device" in f.fix and "MOONCAKE_PROTOCOL" in f.fix


LOC_LEN = (
    "E0102 03:04:05.001100  77 worker_pool.cpp:245] Worker: Process failed for slice (opcode: 0, source_addr: "
    "0x7f00, length: 65536, dest_addr: 0x7e00, local_nic: mlx5_2, peer_nic: 10.0.0.9:15001@mlx5_4, dest: "
    "10.0.0.9:15001): local length error\n"
)


def test_a_length_error_on_a_mooncake_nic_pair_checks_the_unnegotiated_mtu_in_mooncakes_words():
    f = _first(LOC_LEN)
    assert f.id == "rdma-wc-loc-len-err" and f.engine == "mooncake"
    assert any("MC_MTU" in c and "#3868" in c for c in f.checks)
    assert "--disaggregation-ib-device" not in f.fix and "Mooncake's device list" in f.fix
