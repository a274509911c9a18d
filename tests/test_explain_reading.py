"""kvcheck explain reads a log as a whole (issue 20): whose line each is, the release the
log shows, the phase, the first cause and what followed, and known crash signatures.

The excerpts below are written for these tests in the formats the projects print (SGLang's
``[time TPn]`` prefix, vLLM's ``(Worker_DP0_EP0 pid=N) LEVEL MM-DD hh:mm:ss [file.py:N]``,
UCX's signal handler and backtrace, glog lines of NIXL's and Mooncake's C++ files); no
collected log is pasted here. Release facts are read from ``release_index.json``, which
``scripts/gen_explain_release_index.py`` builds from each release's own source, and
checked against the installed SGLang's code.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml

from kvcheck.explain import explain_text, load_catalog
from kvcheck.explain.logrelease import load_index
from kvcheck.explain.signatures import load_signatures
from tests.helpers import run_cli

CATALOG = load_catalog()
T = "[2026-03-02 10:00:{s:02d} TP0] "


def _report(text: str):
    return explain_text(text, source="log").report


# ------------------------------------------------------------------ whose lines

VLLM_NIXL = (
    "(Worker_DP0_EP0 pid=4711) ERROR 03-02 10:00:01 [nixl_connector.py:815] RuntimeError: NIXL transfer failed for request cmpl-1: NIXL_ERR_BACKEND\n"
    "(EngineCore_DP0 pid=4700) ERROR 03-02 10:00:01 [core.py:936] Page size mismatch with the remote engine\n"
)


def test_vllm_lines_are_vllms_and_never_explained_from_sglang():
    rep = _report(VLLM_NIXL)
    assert [e.engine for e in rep.engines] == ["vllm"]
    assert [f for f in rep.findings if f.kind == "catalog"] == []  # NIXL_ERR_BACKEND in a vLLM process: not SGLang's
    assert rep.not_sglang == ["vllm"]


def test_a_mixed_log_explains_only_the_sglang_lines():
    text = VLLM_NIXL + T.format(s=2) + "Scheduler hit an exception: Traceback (most recent call last):\n" \
        "  File \"/usr/lib/python3/site-packages/sglang/srt/disaggregation/common/conn.py\", line 1, in try_ensure_parallel_info\n" \
        "RuntimeError: Page size mismatch: prefill server has page_size=32, but decode server has page_size=64. Both servers must use the same --page-size value.\n"
    rep = _report(text)
    cat = {f.id: f for f in rep.findings if f.kind == "catalog"}
    assert "page-size-mismatch" in cat and cat["page-size-mismatch"].first_line == 5 and cat["page-size-mismatch"].host == "sglang"
    assert all(f.first_line > 2 for f in cat.values())  # nothing on the vLLM lines
    assert rep.first_cause.id == "page-size-mismatch"
    assert {e.engine for e in rep.engines} == {"vllm", "sglang"}


@pytest.mark.parametrize("line,engine", [
    ("E0521 16:22:21.694042   162 transfer_metadata.cpp:877] Local segment descriptor not found", "mooncake"),
    ("E0721 08:06:26.781179    4330 nixl_agent.cpp:866] createXferReq: metadata for remote agent 'a' not found", "nixl"),
    ("[1763107582.750152] [node-6:1110 :0]     ucp_context.c:1321 UCX  WARN  transports 'cuda_ipc','cuda_copy' are not available", "ucx"),
    ("[2025-08-14 00:31:05,973] LMCache WARNING: Failed to allocate memory object, retrying... (nixl_connector_v3.py:567:lmcache.v1.x)", "lmcache"),
    ("[TensorRT-LLM][WARNING] CacheTransceiver getOrAllocateBuffers: bufferCoverTargetNum:0 < targetNum:1", "trtllm"),
    ("2025-04-26T20:46:29.907Z ERROR engine.start: nixlBackendError('NIXL_ERR_BACKEND')", "dynamo"),
    ("2025-12-10T13:50:29.938649Z  INFO memory_pool._finalize_allocation_log: KV Cache is allocated. #tokens: 1", "sglang"),
    ("2025-09-17 08:22:52  INFO sglang_router_rs::server: src/server.rs:261: Starting router on 0.0.0.0:30000", "sglang-router"),
])
def test_each_projects_format_is_attributed_to_it(line, engine):
    rep = _report(line)
    assert [e.engine for e in rep.engines] == [engine]


def test_the_process_of_each_line_is_read_from_the_log():
    text = "# decode pod\n" + T.format(s=1) + "Decode batch. #running-req: 3, #token: 100\n" \
        "# prefill pod\n" + T.format(s=2) + "Prefill batch. #new-seq: 1, #new-token: 4\n"
    rep = _report(text)
    assert rep.engines[0].processes == {"decode": 1, "prefill": 1}
    dump = "[2026-03-02 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, disaggregation_mode='prefill', page_size=1)\n"
    assert _report(dump + T.format(s=1) + "Load weight end.\n").engines[0].processes == {"prefill": 2}


# ------------------------------------------------------------------ the release

def test_an_image_tag_names_the_release_and_the_messages_are_explained_against_it():
    swa = "RuntimeError: PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."
    result = explain_text("image: lmsysorg/sglang:v0.5.16-cu130\n" + swa, source="log")
    assert result.report.release.release == "0.5.16" and result.release == "0.5.16"
    info = result.hits[0].release_info
    assert result.hits[0].entry_id == "state-tp-unsupported" and info["exists"] is True, info  # not "in no scanned release"


def test_the_release_index_agrees_with_the_installed_sglangs_server_args():
    from sglang.srt.server_args import ServerArgs

    index = load_index()
    fields = getattr(ServerArgs, "__struct_fields__", None) or [f.name for f in dataclasses.fields(ServerArgs)]
    assert index["server_args"]["0.5.23"] == list(fields)


def test_a_server_args_dump_narrows_the_release_to_those_with_its_fields():
    index = load_index()
    rel = index["releases"]
    newest = set(index["server_args"][rel[-1]])
    # a field the newest release has and the oldest indexed one does not
    field = sorted(newest - set(index["server_args"][rel[0]]))[0]
    want = [v for v in rel if {"model_path", "tp_size", field} <= set(index["server_args"][v])]
    rep = _report(f"[2026-03-02 10:00:00] server_args=ServerArgs(model_path='m', tp_size=2, {field}=None)\n")
    assert rep.release.candidates == want and rep.release.candidates[-1] == rel[-1] and rel[0] not in want


def test_traceback_line_numbers_fit_the_releases_whose_function_spans_them():
    index = load_index()
    f = "srt/disaggregation/common/conn.py"
    v = index["releases"][-1]
    a, b = index["tables"][index["files"][v][f]]["_handle_route_get"][0]
    line = (a + b) // 2
    want = [r for r in index["releases"] if f in index["files"][r]
            and any(x <= line <= y for x, y in index["tables"][index["files"][r][f]].get("_handle_route_get", []))]
    text = ("Traceback (most recent call last):\n"
            f'  File "/usr/local/lib/python3.12/dist-packages/sglang/{f}", line {line}, in _handle_route_get\n'
            "KeyError: 'x'\n")
    rep = _report(text)
    assert rep.release.candidates == want and v in want


def test_the_route_race_fix_release_is_the_one_whose_code_has_it():
    # the signature says the race is fixed in 0.5.10: the first indexed release whose
    # bootstrap server has the readiness check (sgl-project/sglang#19288)
    index = load_index()
    f = "srt/disaggregation/common/conn.py"
    has = [v for v in index["releases"] if "_is_ready" in index["tables"][index["files"][v][f]]]
    fixed = next(s for s in load_signatures() if s.id == "bootstrap-route-race-typeerror").fixed_in
    assert has and fixed.startswith(has[0] + " "), (has[:1], fixed)


# ------------------------------------------------------------------ phases and the first cause

def _startup_then_requests() -> str:
    return "".join([
        "[2026-03-02 10:00:00] server_args=ServerArgs(model_path='m', disaggregation_mode='prefill')\n",
        T.format(s=1) + "Load weight end. type=X\n",
        "[2026-03-02 10:00:02] The server is fired up and ready to roll!\n",
        '[2026-03-02 10:00:03] INFO:     10.0.0.1:4000 - "POST /generate HTTP/1.1" 200 OK\n',
        T.format(s=4) + "Prefill batch. #new-seq: 1, #new-token: 40\n",
        '[2026-03-02 10:00:05] INFO:     10.0.0.1:4001 - "POST /generate HTTP/1.1" 200 OK\n',
        T.format(s=6) + "Prefill batch. #new-seq: 2, #new-token: 80\n",
    ])


PROGRESS_THREAD_SEGV = (
    "Fatal Python error: Segmentation fault\n"
    '  File "<unknown>", line 0, in cuEventQuery\n'
    '  File "<unknown>", line 0, in uct_cuda_base_iface_event_fd_arm\n'
    '  File "<unknown>", line 0, in ucp_worker_arm\n'
    '  File "<unknown>", line 0, in nixlUcxSharedThread::run()\n'
)


def test_the_progress_thread_segfault_is_named_with_its_phase_from_the_log():
    rep = _report(_startup_then_requests() + PROGRESS_THREAD_SEGV)
    f = rep.first_cause
    assert (f.id, f.phase, f.phase_from) == ("nixl-progress-thread-no-cuda-context", "serving", "log")
    assert any("nixl/issues/2102" in u for u in f.issues)
    # pasted alone, the phase is the signature's own (during serving, on the prefill)
    f = _report(PROGRESS_THREAD_SEGV).first_cause
    assert (f.id, f.phase, f.phase_from, f.process) == ("nixl-progress-thread-no-cuda-context", "serving", "message", "prefill")


UCX_TCP_SEGV = (
    "[node-1:12796:1:13303] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address 0x7f00)\n"
    "==== backtrace (tid:  13303) ====\n"
    " 0  /usr/lib/python3/site-packages/.nixl.mesonpy.libs/nixl.libs/libucs-1.so.0.0.0(ucs_handle_error+0x294) [0x7f01]\n"
    " 1  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x1a07cd) [0x7f02]\n"
    " 2  /usr/lib/python3/site-packages/.nixl.mesonpy.libs/nixl.libs/libuct-2.so.0.0.0(uct_tcp_ep_am_bcopy+0x8a) [0x7f03]\n"
)


def test_a_ucx_segfault_in_the_tcp_transport_is_the_gpu_memory_over_tcp_signature():
    route = '[2026-03-02 10:00:03] 127.0.0.1 [02/Mar/2026:10:00:03 +0000] "GET /route?engine_rank=0 HTTP/1.1" 200 262 "-" "python-requests/2.32"\n'
    rep = _report(route + UCX_TCP_SEGV)
    f = rep.first_cause
    assert (f.id, f.phase) == ("ucx-tcp-device-memory", "first-transfer")
    assert not any(x.id == "ucx-signal-generic" for x in rep.findings)  # the specific one replaces it
    assert any("ucx_info" in c for c in f.checks)


def test_a_crash_outside_nixl_and_ucx_is_not_called_a_transfer_failure():
    text = ("[pool0:1:0:1] Caught signal 4 (Illegal instruction: illegal operand)\n==== backtrace (tid:1) ====\n"
            " 0  /opt/hpcx/ucx/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x1]\n"
            " 3  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x45330) [0x2]\n"
            " 4  /usr/local/lib/python3.12/dist-packages/some_ep_cpp.cpython-312-x86_64-linux-gnu.so(+0x204c2) [0x3]\n")
    f = _report(text).first_cause
    assert f.id == "crash-outside-transfer" and "some_ep_cpp" in f.cause


def test_a_dead_bootstrap_thread_is_the_first_cause_and_the_timeouts_follow():
    text = (
        T.format(s=1) + "Exception in thread Thread-7 (bootstrap_thread):\n"
        "RuntimeError: NIXL_ERR_NOT_FOUND\n"
        + T.format(s=9) + "Prefill bootstrap failed for request rank=0 req.rid='r1' req.bootstrap_room=11 with exception "
        "KVTransferError(bootstrap_room=11): Request 11 timed out after 300.0s in KVPoll.Bootstrapping\n"
        + T.format(s=10) + "Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=11 "
        "with exception KVTransferError(bootstrap_room=11): Aborted by AbortReq.\n"
    )
    rep = _report(text)
    assert rep.first_cause.first_line == 1 and rep.first_cause.role == "cause"
    roles = {f.id: f.role for f in rep.then}
    assert roles.get("sglang-bootstrap-timeout") == "consequence" and roles.get("sglang-aborted-by-abortreq") == "consequence"


def test_only_consequences_say_the_cause_is_elsewhere():
    rep = _report("Decode transfer failed for request rank=1 decode_req.req.rid='a' decode_req.req.bootstrap_room=2 with exception "
                  "KVTransferError(bootstrap_room=2): Failed due to an unknown reason from another rank\n")
    assert rep.first_cause.role == "consequence"


@pytest.mark.parametrize("text,sig", [
    ("[1.0] [h:1:0]  ucp_context.c:1321 UCX  WARN  network devices 'mlx5_1:1','mlx5_2:1' are not available, please use one or more of: 'eth0'(tcp)\n"
     "[1.1] [h:1:0]  select.c:649  UCX  ERROR   no active messages transport to <no debug data>: self/memory - no peer failure handler\n",
     "ucx-net-devices-unavailable"),
    ("[_torch][RANK 0] BindingsNixlTransferAgent init: UCX_TLS=tcp UCX_LOG_LEVEL=\nE ucx_utils.cpp:585] VRAM memory is detected as host by UCX.\n"
     "E nixl_agent.cpp:545] registerMem: registration failed for the specified or all potential backends\n", "ucx-tls-tcp-only"),
    ("E0501 rdma_endpoint.cpp:472] Invalid argument: received packet mismatch, local.local_nic_path: 10.0.0.1:1@rdma0, local.peer_nic_path: 10.0.0.1:2@rdma2\n"
     "E0501 rdma_endpoint.cpp:1033] [Handshake] Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num: Connection timed out [110]\n",
     "mooncake-nic-cross-device"),
    ("E0520 06:53:47.272128 18592 tcp_transport.cpp:136] Session::writeBody failed. Error: Bad address (value: 14), total_transferred_bytes_: 0\n",
     "mooncake-tcp-transport"),
    ("E0721 08:06:26.78 4330 nixl_agent.cpp:866] createXferReq: metadata for remote agent 'def7' not found\n", "stale-remote-agent-after-disconnect"),
    ("E0509 rdma_endpoint.cpp:76] Failed to create QP: Operation not supported [95]\n", "mooncake-efa-rdma-transport"),
])
def test_native_failures_map_to_their_known_signature(text, sig):
    f = _report(text).first_cause
    assert f is not None and f.id == sig and f.cause and f.fix and f.issues


def test_every_signature_is_complete():
    sigs = load_signatures()
    ids = {s.id for s in sigs}
    for s in sigs:
        assert s.cause and s.fix and s.title, s.id
        assert set(s.suppresses) <= ids, s.id
        assert all(u.startswith("https://github.com/") for u in s.issues), s.id
        for p in s.all + s.any + s.unless:
            re.compile(p)


# ------------------------------------------------------------------ structure, not fragments

def test_three_words_of_a_message_are_not_the_message():
    assert explain_text("with speculative decoding").hits == []


def test_a_refused_speculative_algorithm_is_never_the_proposed_fix():
    e = CATALOG.get("decode-radix-speculative")
    msg = "ValueError: " + e.format(algorithm="EAGLE")
    proc = run_cli("explain", "--log", "-", "-o", "table") if False else None  # noqa: F841 (see below)
    result = explain_text(msg, source="log")
    from kvcheck.explain.render import render_explanation

    out = render_explanation(result)
    fix = [ln for ln in out.splitlines() if ln.strip().startswith("fix:")]
    assert fix and all("EAGLE" not in ln and "NEXTN" not in ln for ln in fix), fix
    assert "not proposed:" in out and "EAGLE" in out.split("not proposed:")[1]


def test_every_catalog_entry_has_its_releases_recorded():
    data = json.loads((__import__("pathlib").Path(__file__).resolve().parent.parent / "kvcheck/explain/releases.json").read_text())
    assert {e.id for e in CATALOG.entries} <= set(data["messages"])


# ------------------------------------------------------------------ the command line

def test_explain_takes_o_json_like_preflight_and_the_old_f_json_still_works(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(PROGRESS_THREAD_SEGV)
    new = run_cli("explain", "--log", str(log), "-o", "json")
    assert new.returncode == 0, new.stderr
    assert json.loads(new.stdout)["report"]["first_cause"]["id"] == "nixl-progress-thread-no-cuda-context"
    old = run_cli("explain", "--log", str(log), "-f", "json")
    assert old.returncode == 0 and json.loads(old.stdout)["recognized"] is True
    assert "deprecated" in old.stderr and "-o json" in old.stderr


def test_explain_with_the_pair_names_the_flag_line_to_change(tmp_path):
    from tests.helpers import write_config

    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 32})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 64})
    msg = "RuntimeError: " + CATALOG.get("page-size-mismatch").format(prefill=32, decode=64)
    proc = run_cli("explain", msg, "--prefill", str(p), "--decode", str(d))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    n = next(i for i, ln in enumerate(d.read_text().splitlines(), start=1) if ln.startswith("page-size:"))
    assert f"change: {d}:{n}: page-size: 64" in out  # the decode's line (the decode raises it)
    assert "your configs: finding page-size-mismatch" in out


def test_a_segfault_on_a_mapped_gpu_address_without_frames_is_still_the_device_memory_crash():
    text = ("Initialized NIXL agent: target\nWaiting for transfer\n"
            "[h-1:40:0:41] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address 0x7a00)\n"
            "==== backtrace (tid:41) ====\n"
            " 0  /opt/env/lib/python3.12/site-packages/.nixl.mesonpy.libs/nixl.libs/libucs-9.so.0.0.0(ucs_handle_error+0x294) [0x7a01]\n")
    f = _report(text).first_cause
    assert (f.id, f.phase) == ("ucx-segv-device-memory-as-host", "first-transfer")  # not "at start-up": a transfer crashes


def test_a_crash_inside_mooncakes_transfer_is_named_with_the_transfer_phase():
    text = ("Fatal Python error: Segmentation fault\n\nThread 0x00007f (most recent call first):\n"
            '  File "/opt/sglang/python/sglang/srt/disaggregation/mooncake/transfer_engine.py", line 75 in transfer_sync\n'
            '  File "/opt/sglang/python/sglang/srt/disaggregation/mooncake/conn.py", line 259 in process_layer\n')
    f = _report(text).first_cause
    assert (f.id, f.phase, f.values.get("func")) == ("mooncake-transfer-segfault", "first-transfer", "transfer_sync")


def test_explain_with_the_deployment_file_names_its_lines(tmp_path):
    from tests.helpers import model_dir

    m = model_dir("llama-3.1-8b")
    script = tmp_path / "launch.sh"
    script.write_text(
        f"python -m sglang.launch_server --model-path {m} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 32 --port 30000\n"
        f"python -m sglang.launch_server --model-path {m} --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001\n")
    msg = "RuntimeError: " + CATALOG.get("page-size-mismatch").format(prefill=32, decode=64)
    proc = run_cli("explain", msg, "-f", str(script), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["hits"][0]["cause"]["finding"] == "page-size-mismatch"  # the deployment's preflight predicts it
    table = " ".join(run_cli("explain", msg, "-f", str(script)).stdout.split())
    assert f"{script}:1: …--page-size 32" in table and f"{script}:2: …--page-size 64" in table


def test_mooncake_local_protection_errors_point_to_the_gpu_nic_pairing():
    text = ("W0101 00:00:01.000001 7 worker_pool.cpp:303] Failed (local_nic: mlx5_2, peer_nic: 10.0.0.2:1@mlx5_1): local protection error\n"
            "W0101 00:00:01.000002 7 worker_pool.cpp:303] Too many errors found in local RNIC 10.0.0.1:2@mlx5_2, mark it inactive\n")
    f = _report(text).first_cause
    assert f.id == "mooncake-local-protection-error" and f.engine == "mooncake" and any("topo" in c for c in f.checks)
