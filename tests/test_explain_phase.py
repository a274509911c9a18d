"""The phase of every finding comes from the log's own events (issue 20: "every SGLang or NIXL
crash signature recognized with its phase"), and where the log shows none, the answer says so.

The excerpts are written for these tests in the formats the projects print; the event lines are
the runtime's own texts, checked against the installed SGLang's source."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kvcheck.explain.matcher import explain_text
from kvcheck.explain.render import render_explanation

T = "[2026-03-02 10:00:{s:02d}] "


def _source(rel: str) -> str:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    return (Path(spec.origin).parent / rel).read_text("utf-8")


def _first(text: str):
    rep = explain_text(text, source="log").report
    assert rep.first_cause is not None
    return rep.first_cause


def test_requests_before_the_server_says_ready_are_its_warm_up():
    """http_server._wait_and_warmup posts its warm-up request and only then logs 'The server is
    fired up and ready to roll!': a failure after that line, on the first request, is on the first
    request, not during serving (the warm-up's 200 is not a served request)."""
    src = _source("srt/entrypoints/http_server.py")
    ready = "The server is fired up and ready to roll!"
    assert ready in src and src.index("def _wait_and_warmup") < src.index(ready)
    log = (
        T.format(s=1)
        + 'INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK\n'
        + T.format(s=2)
        + ready
        + "\n"
        + T.format(s=9)
        + "KVTransferError(bootstrap_room=42): Could not fetch prefill parallel info from bootstrap_addr: p:8998\n"
    )
    f = _first(log)
    assert (f.phase, f.phase_from, f.phase_shown) == ("first-request", "log", True)
    # without the ready line the 200 was a served request: the failure comes after it
    f = _first(log.replace(T.format(s=2) + ready + "\n", ""))
    assert f.phase != "startup"


def test_a_hicache_store_set_up_is_start_up():
    """MooncakeStore.__init__ logs 'Mooncake store setup successfully.' while the scheduler builds
    its HiCache storage: Mooncake's failures right after it are start-up's."""
    assert "Mooncake store setup successfully." in _source("srt/mem_cache/storage/mooncake_store/mooncake_store.py")
    log = (
        "[2026-03-02 10:00:01 TP1] Mooncake store setup successfully.\n"
        "E0302 10:00:02.000100 4242 transfer_metadata_plugin.cpp:909] SocketHandShakePlugin: connect()10.0.0.9:15001: "
        "Connection refused [111]\n"
        "E0302 10:00:02.000200 4242 transfer_task.cpp:572] Failed to open segment for endpoint='10.0.0.9:15001'\n"
    )
    f = _first(log)
    assert (f.phase, f.phase_from) == ("startup", "log")


def test_a_message_over_lines_that_names_its_request_is_on_a_request():
    """SGLang's prefill logs 'Prefill bootstrap failed for request rank=... req.rid=...
    req.bootstrap_room=...' over several lines: the request it names is the log's own event."""
    log = (
        "[2026-03-02 10:00:01 DP1] Prefill bootstrap failed for request rank=0\n"
        "  req.rid='a1b2'\n"
        "  req.bootstrap_room=12345\n"
        "  with exception KVTransferError(bootstrap_room=12345):\n"
    )
    rep = explain_text(log, source="log").report
    f = next(x for x in rep.findings if x.first_line == 1)
    assert (f.phase, f.phase_from, f.phase_shown) == ("first-request", "log", True)


def test_with_no_event_in_the_log_the_phase_is_said_not_shown():
    """A line pasted alone: no phase is guessed; a message whose own words tell when it runs is
    said as the message's, not as the log's."""
    exp = explain_text("ValueError: the frobnicator refused 3 widgets today\n", source="log")
    f = exp.report.first_cause
    assert f is not None and f.phase == "" and not f.phase_shown
    assert "phase not shown in the log" in render_explanation(exp)
    exp = explain_text("OSError: [Errno 98] Address already in use\n", source="log")
    f = exp.report.first_cause
    assert f is not None and f.phase == "startup" and not f.phase_shown
    assert "the log shows no event before it" in render_explanation(exp)


# ------------------------------------------------------------------ the fix in the printing engine's words

_LOCAL_PROTECTION = (
    "W0101 00:00:01.000001 7 worker_pool.cpp:303] Failed (local_nic: mlx5_2, peer_nic: 10.0.0.2:1@mlx5_1): "
    "local protection error\n"
    "W0101 00:00:01.000002 7 worker_pool.cpp:303] Too many errors found in local RNIC 10.0.0.1:2@mlx5_2, mark it "
    "inactive\n"
)


def test_a_mooncake_failure_names_sglangs_device_flag_only_for_sglang():
    """Mooncake's worker_pool lines name no engine: in an SGLang process the fix names SGLang's
    --disaggregation-ib-device (its disaggregation_ib_device field, arg_groups/fields/disagg.py); where the
    process is not shown it is named as SGLang's; in a vLLM process SGLang's flag is never the fix."""
    assert "disaggregation_ib_device" in _source("srt/arg_groups/fields/disagg.py")  # 0.5.23: the field

    def fix_of(text: str) -> str:
        f = _first(text)
        assert f.id == "mooncake-local-protection-error"
        return f.fix + " " + " ".join(f.checks)

    sglang = fix_of("[2026-03-02 10:00:00 TP0] Prefill bootstrap server started\n" + _LOCAL_PROTECTION)
    assert "--disaggregation-ib-device" in sglang
    alone = fix_of(_LOCAL_PROTECTION)
    assert "(SGLang: --disaggregation-ib-device)" in alone
    vllm = fix_of(
        "(EngineCore_DP0 pid=9) INFO 01-01 00:00:00 [core.py:71] Initializing a V1 LLM engine (v0.11.0) with config\n"
        + "".join(f"(EngineCore_DP0 pid=9) {ln}\n" for ln in _LOCAL_PROTECTION.splitlines())
    )
    assert "vLLM's own setting, not SGLang's --disaggregation-ib-device" in vllm
    assert "(SGLang: --disaggregation-ib-device" not in vllm
    assert "SGLang's the " not in vllm and vllm.count("own setting") == vllm.count("--disaggregation-ib-device")


def test_frames_pasted_below_their_exception_line_are_its_traceback():
    """An exception line pasted first, then '...' and the frame that matters with its opening cut
    ('  model_runner.py", line 397, in __init__'): one traceback, whose frame (a constructor) puts
    it at start-up."""
    log = (
        "ImportError: the frobnicator extension was not built for this torch\n"
        "...\n"
        '  model_runner.py", line 397, in __init__\n'
        "    self.init_frobnicator()\n"
    )
    rep = explain_text(log, source="log").report
    f = rep.first_cause
    assert f is not None and f.first_line == 1 and f.phase == "startup" and not f.phase_shown
    assert "model_runner.py:397 in __init__" in f.cause
    assert [x.first_line for x in rep.findings] == [1]


def test_an_address_a_listener_binds_is_a_start_up_failure():
    """EADDRNOTAVAIL from a thread named as a listener, binding a ROUTER socket (vLLM's NIXL
    side channel binds its handshake listener when the worker starts): start-up, though the
    thread's name says 'handshake'; the same errno from a connect is not made a start-up one."""
    frames = (
        "Exception in thread side_listener:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/threading.py", line 1012, in run\n'
        "    self._target(*self._args, **self._kwargs)\n"
        '  File "/opt/app/connector.py", line 409, in _side_handshake_listener\n'
        "    with zmq_ctx(zmq.ROUTER, path) as sock:\n"
    )
    f = _first(frames + "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.0.0.1:5600')\n")
    assert f.id == "os-eaddrnotavail" and f.phase == "startup"
    connect = frames.replace("_side_handshake_listener", "_side_handshake").replace(
        "with zmq_ctx(zmq.ROUTER, path) as sock:", "sock.connect(path)"
    )
    f = _first(connect + "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.0.0.1:5600')\n")
    assert f.id == "os-eaddrnotavail" and f.phase != "startup"


def test_a_failed_transfer_line_is_a_request_event():
    """SGLang's decode logs 'Decode transfer failed for request rank=...' (decode.py, 0.5.5 ..
    0.5.23): a request reached its KV transfer, so what the log shows after it is past start-up."""
    src = _source("srt/disaggregation/decode.py")
    assert "Decode transfer failed for request rank=" in src
    log = (
        "[2026-03-02 10:00:01 TP0] Decode transfer failed ... KVTransferError: Failed to get kvcache\n"
        "ValueError: the frobnicator refused 3 widgets today\n"
    )
    rep = explain_text(log, source="log").report
    f = next(x for x in rep.findings if x.first_line == 2)
    assert (f.phase, f.phase_from, f.phase_shown) == ("first-request", "log", True)


def test_a_fault_dumps_thread_is_read_innermost_first():
    """Python's fault handler prints each thread 'most recent call first' (faulthandler): the
    innermost frame is the first one, so the stack's place is the scheduler's event loop, not
    the process entry that started it."""
    log = (
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f1d8c9ff640 (most recent call first):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1040 in '
        "event_loop_normal\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3100 in '
        "run_scheduler_process\n"
    )
    rep = explain_text(log, source="log").report
    stack = next(f for f in rep.findings if f.id == "python-exception-generic")
    assert "in event_loop_normal" in stack.cause and "in run_scheduler_process" not in stack.cause
