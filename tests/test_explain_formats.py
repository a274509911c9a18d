"""Messages matched whole by SGLang's own format strings, and the general rules that read
what a failure line carries (errno, a message wrapped over lines, the NIXL call before a
status). Every log excerpt here is written for the test; the formats come from the
releases' source (``kvcheck/explain/formats.json.gz``) and are checked against the SGLang
installed here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kvcheck.explain.formats import load_formats, phase_of_function
from kvcheck.explain.matcher import explain_text

DEEPEP_SPEC = (
    "ValueError: Invalid configuration: 'deep_gemm' speculative MoE runner backend with 'deepep' a2a backend "
    "requires expert parallelism (ep_size > 1). Current ep_size is 1. Please set --ep-size > 1 (e.g., --ep-size 8) "
    "to use this configuration, or change --speculative-moe-a2a-backend to 'none' if expert parallelism is not "
    "available."
)


def _report(text: str):
    return explain_text(text, source="log").report


def _installed_source(module: str) -> str:
    """The installed SGLang's source of ``module`` (read, not imported: cheap)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    root = Path(spec.origin).parent.parent
    return (root / (module.replace(".", "/") + ".py")).read_text("utf-8")


def test_a_format_is_matched_whole_with_its_fields_and_releases():
    ix = load_formats()
    m = ix.match(
        "RuntimeError: Page size mismatch: prefill server has page_size=16, but decode server has page_size=64. "
        "Both servers must use the same --page-size value."
    )
    assert m is not None and m.kind == "raise:RuntimeError"
    assert (m.module, m.function) == (
        "sglang.srt.disaggregation.common.conn",
        "CommonKVManager.try_ensure_parallel_info",
    )
    assert m.values["page_size"] == "16"
    # the same text is in the installed release's function (the ground truth)
    assert "Page size mismatch: prefill server has page_size=" in _installed_source(m.module)
    assert "0.5.23" in m.releases and "0.5.5" not in m.releases  # releases.json: introduced in 0.5.8
    assert phase_of_function(m.function, m.module) == "first-request"
    # a fragment of it is not the message
    assert ix.match("prefill server has page_size=16") is None


def test_an_sglang_argument_refusal_pasted_alone_names_sglang_the_check_and_the_flags():
    f = _report(DEEPEP_SPEC).first_cause
    assert f is not None and f.id == "python-exception-generic"
    assert (f.engine, f.phase) == ("sglang", "startup")
    assert "argument checks" in f.values["component"] and "refuses its own arguments" in f.cause
    assert "--ep-size" in f.fix and "--speculative-moe-a2a-backend" in f.fix
    m = load_formats().match(DEEPEP_SPEC)
    assert m is not None and "requires expert parallelism (ep_size > 1)" in _installed_source(m.module)
    assert f"releases {m.span(load_formats().releases)}" in f.cause


def test_a_refusal_no_sglang_release_formats_is_said_not_to_be_sglangs():
    text = (
        "ValueError: The frobnicator needs a widget size in split mode.\n"
        "When using --split-mode on, you must explicitly provide --widget-size.\n"
    )
    f = _report(text).first_cause
    assert f is not None and f.engine == ""
    # no scanned release of SGLang (nor of the projects kvcheck read) formats it: said, with
    # the release it may still be (one newer than the newest scanned)
    assert "not SGLang's text" in f.title and "another project's text" in f.cause
    assert f"newer than {load_formats().releases[-1]}" in f.cause
    # the second sentence belongs to the message: its advice is the fix
    assert "you must explicitly provide --widget-size" in f.fix and f.phase == "startup"


def test_an_errno_says_what_the_socket_call_met():
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/disaggregation/common/conn.py", line 400, in '
        "_connect\n"
        "    sock.connect(addr)\n"
        "ConnectionRefusedError: [Errno 111] Connection refused\n"
    )
    f = _report(tb).first_cause
    assert (f.id, f.engine) == ("os-econnrefused", "sglang")
    assert "nothing listens" in f.cause
    g = _report("zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.7:30001')\n").first_cause
    assert (g.id, g.phase) == ("os-eaddrinuse", "startup")
    assert "--disaggregation-bootstrap-port" in g.fix


def test_a_nixl_status_is_read_in_the_api_step_the_call_before_it_shows():
    text = "    peer = agent.add_remote_agent(blob)\n    print(peer)\nerror: NIXL_ERR_BACKEND\n"
    f = _report(text).first_cause
    assert (f.id, f.phase) == ("nixl-status-generic", "first-transfer")
    assert "metadata exchange" in f.title and "reach" in f.cause


def test_the_backend_line_before_a_nixl_status_is_the_cause():
    text = (
        "[1700000000.1] [hostA:11:0]   tcp_ep.c:1260 UCX  ERROR tcp_ep 0x1 (state=CONNECTED): send(110) "
        "failed: Connection reset by remote peer\n"
        "Traceback (most recent call last):\n"
        '  File "/x/site-packages/nixl/_api.py", line 457, in transfer\n'
        "    status = self.agent.postXferReq(handle, notif_msg)\n"
        "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND\n"
    )
    rep = _report(text)
    assert rep.first_cause.engine == "ucx" and rep.first_cause.first_line == 1
    assert any(f.id == "nixl-status-generic" and f.role == "consequence" for f in rep.then)


def test_an_errno_inside_a_native_or_an_error_log_line_is_read_too():
    native = (
        "E0101 10:00:00.000001  42 transfer_metadata_plugin.cpp:909] SocketHandShakePlugin: connect()10.0.0.9:15000: "
        "Connection refused [111]\n"
    )
    f = _report(native).first_cause
    assert f.engine == "mooncake" and "ECONNREFUSED" in f.title and "nothing listens" in f.cause
    line = (
        "(Worker_DP0_TP0 pid=7) ERROR 01-01 10:00:00 [kv_sender.py:12] Sending thread exception: Address already "
        "in use (addr='tcp://10.0.0.9:20000')\n"
    )
    g = _report(line).first_cause
    assert g.id == "os-eaddrinuse" and g.phase == "startup"
    # a vLLM worker's port: its fix never names SGLang's flags
    assert g.engine == "vllm" and "--disaggregation-bootstrap-port" not in g.fix and "vLLM's own port settings" in g.fix
    bind = _report("zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.0.0.9:5600')\n").first_cause
    assert bind.id == "os-eaddrnotavail" and "not an address of this host" in bind.cause


def test_the_fix_names_the_lines_of_the_given_configs_that_set_the_flags(tmp_path):
    from kvcheck.explain.render import render_explanation

    cfg = tmp_path / "prefill.yaml"
    cfg.write_text("model-path: /m\ndisaggregation-mode: prefill\nep-size: 1\nspeculative-moe-a2a-backend: deepep\n")
    result = explain_text(DEEPEP_SPEC, source="log")
    result.configs = {"prefill": str(cfg)}
    text = " ".join(render_explanation(result).split())  # the renderer wraps long lines
    assert f"{cfg}:3: ep-size: 1" in text and f"{cfg}:4: speculative-moe-a2a-backend: deepep" in text
    assert "(e.g., --ep-size 8)" in text  # the advice is read whole, past its abbreviations


def test_a_line_sglang_logs_at_error_level_is_located_and_dates_the_release():
    rep = _report("[2026-01-01 10:00:00 TP0] Deferred KV release failed for room 4242\n")
    f = rep.first_cause
    assert (f.id, f.engine) == ("sglang-error-log-generic", "sglang")
    assert "DecodeTransferQueue.resolve_deferred_releases" in f.cause
    assert "Deferred KV release failed for room" in _installed_source("sglang.srt.disaggregation.decode")
    clue = next(c for c in rep.release.clues if c.kind == "message format")
    assert clue.releases[-1] == "0.5.23" and "0.5.10" not in clue.releases  # the message is younger
    assert rep.release.candidates == clue.releases  # the only clue the line gives


def test_another_engines_line_is_never_read_as_an_sglang_format():
    # the same text in a vLLM worker's line: vLLM's, not SGLang's
    line = "(Worker_TP0 pid=5) ERROR 01-01 10:00:00 [x.py:1] Deferred KV release failed for room 4242\n"
    rep = _report(line)
    assert all(f.engine != "sglang" for f in rep.findings)


def test_a_registration_errno_with_its_access_flags_and_a_full_send_queue():
    reg = (
        "[io] [error] RegisterRdmaMemoryRegion failed! addr:0x7f0000000000, size:1048576, accessFlag:15, errno:22 "
        "(Invalid argument)\n"
    )
    f = _report(reg).first_cause
    assert f.id == "rdma-register-gpu-memory" and "EINVAL" in f.title
    assert "REMOTE_ATOMIC" in f.cause  # bit 8 of ibv_access_flags: the NIC may lack atomics
    sq = _report("SQ full (batch): ep=0 depth=1024 requested=1 max=1024\n").first_cause
    assert (sq.id, sq.phase) == ("rdma-send-queue-full", "serving")


def test_an_os_error_inside_a_message_sglang_logs_is_read_with_its_place():
    line = (
        "[2026-01-01 10:00:00] Error fetching prefill parallel info from bootstrap: "
        "HTTPConnectionPool(host='10.0.0.5', "
        "port=8998): Max retries exceeded with url: /route (Caused by NewConnectionError('<x>: Failed to establish a "
        "new "
        "connection: [Errno 111] Connection refused'))\n"
    )
    rep = _report(line)
    f = rep.first_cause
    # the message's own meaning (the decode's GET /route to the prefill's bootstrap server), with
    # the OS error the line carries
    assert (f.id, f.engine) == ("sglang-bootstrap-unreachable", "sglang")
    assert "_get_prefill_parallel_info_from_server" in f.cause and f.phase == "first-request"
    assert "nothing listens" in f.cause and "(ECONNREFUSED)" in f.cause and "--host 0.0.0.0" in f.fix
    # a message of older releases only (0.5.10 renamed it): the installed 0.5.23 has not this text,
    # and the log's release window ends where the text does
    assert "Error fetching prefill parallel info from bootstrap" not in _installed_source(
        "sglang.srt.disaggregation.common.conn"
    )
    assert rep.release.candidates and rep.release.candidates[-1] == "0.5.9"


def test_an_sglang_message_cut_at_either_end_is_still_sglangs():
    """A launch-time message with a short opening literal ('Rank {rank} scheduler died during
    initialization (exit code: {exitcode}). ...', engine._scheduler_died_error, 0.5.10 on) pasted
    without its end, and one pasted without its opening, are SGLang's, with the fields shown."""
    ix = load_formats()
    src = _installed_source("sglang.srt.entrypoints.engine")
    assert "scheduler died during initialization" in src and "def _scheduler_died_error" in src
    end_cut = ix.match("RuntimeError: Rank 3 scheduler died during initialization")
    assert end_cut is not None and end_cut.truncated and end_cut.engine == "sglang"
    assert end_cut.function == "_scheduler_died_error" and end_cut.values == {"rank": "3"}
    assert end_cut.releases[0] == "0.5.10" and end_cut.releases[-1] == ix.releases[-1]
    start_cut = ix.match(
        "...died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the OS "
        "OOM killer. Run `dmesg -T | grep -i oom` to check."
    )
    assert start_cut is not None and start_cut.truncated and start_cut.function == "_scheduler_died_error"
    assert start_cut.values == {"exitcode": "-9"}
    # before 0.5.10 the launcher's wait says 'Initialization failed. Please see the error messages above.'
    older = ix.match("ailed. Please see the error messages above.")
    assert older is not None and older.function == "_wait_for_scheduler_ready" and "0.5.5" in older.releases
    # too little of a message to be it: a cut opening of 39 characters
    assert ix.match("ed. Please see the error messages above") is None
    rep = _report("RuntimeError: Rank 0 scheduler died during initialization\n")
    assert [e.engine for e in rep.engines] == ["sglang"]
    assert rep.first_cause is not None and "not SGLang's text" not in rep.first_cause.title
    assert rep.first_cause.phase == "startup"  # the launcher's wait for its schedulers


def test_another_engines_message_cut_short_stays_that_engines():
    """vLLM's KV-load failure line (Scheduler._handle_invalid_blocks: 'Failing {} request(s) due to
    KV load failure (failure_policy=..., {} tokens affected). Request IDs: {}') pasted up to its
    first clause is vLLM's, never SGLang's."""
    rep = _report("ERROR [scheduler.py:2293] Failing 2 request(s) due to KV load failure\n")
    assert [e.engine for e in rep.engines] == ["vllm"]
    assert all(f.engine != "sglang" for f in rep.findings)


def test_a_message_sglang_prints_through_its_own_helpers_is_sglangs():
    """srt/utils/common.py's raise_error_or_warn(obj, strict, counter_name, message) raises
    ValueError(message) or logs it: the scheduler's idle leak check ('{pool_name} memory leak
    detected! {token_msg}', SchedulerInvariantChecker._report_leak, 0.5.11 on) is SGLang's text."""
    common = _installed_source("sglang.srt.utils.common")
    assert "def raise_error_or_warn(obj, strict, counter_name, message" in common
    m = load_formats().match(
        "ValueError: pool memory leak detected! [full] total=8, available=8, evictable=0, protected=0, "
        "session_held=0, uncached=0"
    )
    assert m is not None and m.engine == "sglang" and m.function.endswith("_report_leak")
    assert m.exception_type == "ValueError" and m.releases[0] == "0.5.11"


def test_a_message_cut_inside_its_opening_literal_is_still_its_projects():
    """'PD DCP source/destination KV geometry differs: src={}, dst={}' (CommonKVManager.
    prepare_dcp_token_item_lens, common/conn.py 0.5.17 .. 0.5.19) pasted up to its colon, the
    values wrapped away: SGLang's, in those releases; fewer than 40 characters of it are nobody's."""
    ix = load_formats()
    m = ix.match("RuntimeError: PD DCP source/destination KV geometry differs:")
    assert m is not None and m.truncated and m.function == "CommonKVManager.prepare_dcp_token_item_lens"
    assert (m.releases[0], m.releases[-1]) == ("0.5.17", "0.5.19")
    assert ix.match("RuntimeError: PD DCP source/destination KV geom") is None
