"""The SGLang router's own log lines are the router's (``kvcheck explain``).

The router lines below are written in its log format: tracing_subscriber's full format
under its ``ChronoUtc("%Y-%m-%d %H:%M:%S")`` timer with the source file and line on
(smg ``model_gateway/src/observability/logging.rs`` ``init_logging``, lightseekorg/smg
73da68ca), under the targets of its crate's names over time (``sglang_router_rs``,
``sgl_model_gateway``, ``smg``). Their messages are the texts of its ``error!``/``warn!``/
``info!`` macros at that commit (``routers/http/pd_router.rs``, ``worker/worker.rs``,
``worker/circuit_breaker.rs``), with values of our own.
"""

from __future__ import annotations

import json

import pytest

from kvcheck.explain.lines import Attributor
from kvcheck.explain.matcher import explain_text

PD = "model_gateway/src/routers/http/pd_router.rs"
LINES = {
    # PDRouter::handle_server_selection_error
    "router-pd-pair-unavailable": f"2026-04-02 08:15:00 ERROR smg::routers::http::pd_router: {PD}:176: "
    "Failed to select PD pair error=No healthy prefill worker for model qwen3",
    # PDRouter::execute_dual_dispatch_internal, PDRouter::proxy_to_worker
    "router-pd-transport-error": f"2026-04-02 08:15:01 ERROR smg::routers::http::pd_router: {PD}:687: "
    "PD request transport error, both sides aborted: error sending request for url "
    "(http://10.9.0.4:31000/generate): connection refused",
    "router-decode-error-status": f"2026-04-02 08:15:02 ERROR smg::routers::http::pd_router: {PD}:704: "
    "Decode server returned error status decode_url=http://10.9.0.7:31001 status=500 Internal Server Error",
    "router-proxy-failed": f"2026-04-02 08:15:03 ERROR smg::routers::http::pd_router: {PD}:152: "
    "Failed to proxy request server: operation timed out",
    # BasicWorker::http_health_check
    "router-health-check-status": "2026-04-02 08:15:04  WARN smg::worker::worker: model_gateway/src/worker/"
    "worker.rs:1474: HTTP health check returned non-success status for http://10.9.0.4:31000/health: "
    "503 Service Unavailable",
    "router-health-check-failed": "2026-04-02 08:15:05  WARN smg::worker::worker: model_gateway/src/worker/"
    "worker.rs:1482: HTTP health check failed for http://10.9.0.4:31000/health: reqwest::Error { kind: "
    "Request, source: ConnectError }",
    # CircuitBreaker::transition_to
    "router-circuit-breaker-open": "2026-04-02 08:15:06  INFO smg::worker::circuit_breaker: model_gateway/src/"
    "worker/circuit_breaker.rs:290: Circuit breaker state transition: closed -> open",
}


def _router_only(text: str):
    result = explain_text(text)
    assert [f.engine for f in result.foreign] == ["sglang-router"]
    assert result.foreign[0].name == "SGLang router"
    assert result.hits == []  # never read with SGLang's catalog
    # no finding is given to SGLang or another project's formats
    assert {f.engine for f in result.report.findings} == {"sglang-router"}
    return result


@pytest.mark.parametrize("fid", sorted(LINES))
def test_a_router_message_kvcheck_knows_is_the_routers_and_explained(fid):
    result = _router_only(LINES[fid])
    [f] = result.report.findings
    assert (f.id, f.process) == (fid, "router")
    assert "smg source, commit 73da68ca" in f.cause
    assert result.exit_code == 0


def test_the_fields_of_the_message_fill_its_meaning():
    [f] = _router_only(LINES["router-decode-error-status"]).report.findings
    assert f.title == "The decode server http://10.9.0.7:31001 answered the router with HTTP 500 Internal Server Error"
    assert f.role == "consequence"  # the cause is in the decode server's own log


def test_the_circuit_breaker_closing_again_is_not_its_opening():
    line = LINES["router-circuit-breaker-open"].replace("closed -> open", "half_open -> closed")
    result = explain_text(line)
    assert "router-circuit-breaker-open" not in [f.id for f in result.report.findings]
    assert [f.engine for f in result.foreign] == ["sglang-router"]


@pytest.mark.parametrize(
    "line",
    [
        # every crate name the router's target has had, and the RFC 3339 timer
        "2026-04-02 08:16:00 ERROR sglang_router_rs::routers::http::pd_router: src/routers/http/pd_router.rs:512: "
        "Failed to send request to prefill worker http://10.9.0.4:31000: connection refused",
        "2026-04-02 08:16:00 ERROR sgl_model_gateway::routers::http::pd_router: src/routers/http/pd_router.rs:512: "
        "Failed to send request to prefill worker http://10.9.0.4:31000: connection refused",
        "2026-04-02T08:16:00.120Z ERROR smg::routers::http::pd_router: Failed to send request to prefill worker "
        "http://10.9.0.4:31000: connection refused",
        # the spans the event is in, between the level and the target (its request middleware's)
        '2026-04-02 08:16:00 ERROR http_request{method=POST uri=/generate version=HTTP/1.1 module="smg" '
        'request_id="req-7"}: smg::routers::http::pd_router: /build/smg/src/routers/http/pd_router.rs:512: '
        "Failed to send request to prefill worker http://10.9.0.4:31000: connection refused",
        # a terminal's colours (the router colours its lines by default)
        "\x1b[2m2026-04-02 08:16:00\x1b[0m \x1b[31mERROR\x1b[0m \x1b[2msmg::routers::http::pd_router\x1b[0m"
        "\x1b[2m:\x1b[0m Failed to send request to prefill worker http://10.9.0.4:31000: connection refused",
    ],
)
def test_a_router_error_like_another_projects_message_stays_the_routers(line):
    # the message reads much like one SGLang logs (its encoder receiver's send failure):
    # without the router's prefix read first, it was given to SGLang's format
    result = _router_only(line)
    [f] = result.report.findings
    assert (f.id, f.process) == ("sglang-router-error-log-generic", "router")
    assert f.title.startswith("SGLang router logged an error: Failed to send request to prefill worker")


def test_each_router_line_is_placed_in_the_router_process():
    a = Attributor()
    for line in LINES.values():
        info = a.feed(line)
        assert (info.engine, info.host, info.process) == ("sglang-router", "sglang-router", "router")


def test_in_a_pd_log_the_servers_fault_comes_before_the_routers_report_of_it():
    sglang = (
        "[2026-04-02 08:15:02 TP0] RuntimeError: Page size mismatch: prefill server has page_size=32, but decode "
        "server has page_size=64. Both servers must use the same --page-size value."
    )
    result = explain_text(LINES["router-decode-error-status"] + "\n" + sglang + "\n")
    first = result.report.first_cause
    assert first is not None and first.engine == "sglang"
    assert first.process != "router"  # the router's line before it does not make it the router's
    router = [f for f in result.report.findings if f.engine == "sglang-router"]
    assert [(f.id, f.process) for f in router] == [("router-decode-error-status", "router")]


def _json_line(level: str, message: str, line: int) -> str:
    # tracing's JSON layer with flatten_event (the router's --log-json), keys in its order
    return json.dumps(
        {
            "timestamp": "2026-04-02 08:17:00",
            "level": level,
            "message": message,
            "target": "smg::routers::http::pd_router",
            "filename": PD,
            "line_number": line,
        },
        separators=(",", ":"),
    )


def test_the_routers_json_lines_are_the_routers_and_read_by_their_message():
    text = (
        _json_line("ERROR", "Failed to select PD pair error=No healthy decode worker for model qwen3", 176)
        + "\n"
        + _json_line("ERROR", "Failed to send request to prefill worker http://10.9.0.4:31000: connection refused", 512)
        + "\n"
    )
    result = _router_only(text)
    assert [(f.id, f.process) for f in result.report.findings] == [
        ("router-pd-pair-unavailable", "router"),
        ("sglang-router-error-log-generic", "router"),
    ]
    assert result.report.findings[1].title.startswith("SGLang router logged an error: Failed to send request")


@pytest.mark.parametrize(
    ("line", "engine"),
    [
        # Dynamo's Rust runtime prints the same tracing format under its own targets
        (
            "2026-04-02T08:18:00.120Z ERROR dynamo_runtime::pipeline::network: Failed to send request to worker",
            "dynamo",
        ),
        (
            "[2026-04-02 08:18:00 TP0] Prefill transfer failed for request rank=0 with exception KVTransferError",
            "sglang",
        ),
    ],
)
def test_a_line_of_another_process_in_the_same_format_is_not_the_routers(line, engine):
    info = Attributor().feed(line)
    assert info.engine == engine and info.process != "router"


def test_a_known_message_inside_a_request_span_is_read_whole():
    line = (
        '2026-04-02 08:19:00 ERROR http_request{method=POST uri=/v1/chat/completions module="smg" '
        'request_id="chat-9"}: smg::routers::http::pd_router: /build/smg/src/routers/http/pd_router.rs:590: '
        "Decode server returned error status decode_url=http://10.9.0.7:31001 status=404 Not Found"
    )
    [f] = _router_only(line).report.findings
    assert (f.id, f.process) == ("router-decode-error-status", "router")
    assert f.title == "The decode server http://10.9.0.7:31001 answered the router with HTTP 404 Not Found"
