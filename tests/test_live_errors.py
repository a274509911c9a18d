"""Live sources that fail: each gives one clear line and the documented exit status.

Exit statuses (kvcheck.sources.live): 3 when the live source gives no usable answer in
time (unreachable, timed out, still 503, malformed JSON), 2 when the invocation is wrong
(401/403: no or a refused API key). Real servers on 127.0.0.1, the real CLI in a fresh
process; SGLang is not needed here.
"""

from __future__ import annotations

import time

import httpx
import pytest
from helpers import run_cli, write_config
from live_http import LoopbackServer, Reply, free_port

from kvcheck.errors import InputError
from kvcheck.sources.live import LiveSourceError, capture

DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


def _preflight(tmp_path, prefill: str, *extra: str, env: dict | None = None):
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    return run_cli("preflight", "--prefill", prefill, "--decode", str(d), "--format", "json", "--kernel", "builtin", *extra)


def test_unreachable_port_is_exit_3_with_the_address_and_the_error(tmp_path):
    port = free_port()
    t0 = time.monotonic()
    proc = _preflight(tmp_path, f"http://127.0.0.1:{port}", "--deadline", "1", "--connect-timeout", "0.5")
    assert proc.returncode == 3, proc.stderr
    assert _json_error_only(proc.stdout, 3)  # -o json: one error object, no verdict
    line = proc.stderr.strip()
    assert f"127.0.0.1:{port}" in line
    assert "could not reach the prefill server" in line
    assert "ConnectError" in line and "refused" in line.lower()
    assert time.monotonic() - t0 < 8


def test_slow_server_past_the_deadline_is_exit_3_and_the_deadline_holds(tmp_path):
    t0 = time.monotonic()
    run_cli("--version")
    startup = time.monotonic() - t0  # this machine's start-up cost right now
    with LoopbackServer({"/server_info": Reply(200, {"model_path": "x"}, delay=8)}) as srv:
        t0 = time.monotonic()
        proc = _preflight(tmp_path, srv.url, "--deadline", "1")
        took = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    # The read timeout or the deadline's watchdog, whichever fires first: one status.
    assert ("read timeout" in proc.stderr or "waiting for the answer headers" in proc.stderr) and "within the 1 s deadline" in proc.stderr
    assert took < 1 + 2 + 3 * startup, (took, startup)


def test_malformed_json_is_exit_3_and_the_body_is_not_echoed(tmp_path):
    body = '{"model_path": "/m", "api_key": "sk-live-LEAKME", "page_size": 1'  # truncated
    with LoopbackServer({"/server_info": Reply(200, body)}) as srv:
        proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 3, proc.stderr
    assert "malformed JSON" in proc.stderr and "/server_info" in proc.stderr
    assert "LEAKME" not in proc.stderr + proc.stdout


def test_json_that_is_not_sglang_server_info_is_exit_3(tmp_path):
    with LoopbackServer({"/server_info": Reply(200, ["not", "an", "object"])}) as srv:
        proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 3
    assert "not SGLang's server info" in proc.stderr


def test_no_server_info_endpoint_is_exit_3(tmp_path):
    with LoopbackServer({}) as srv:
        proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 3
    assert "neither /server_info nor /get_server_info" in proc.stderr
    assert [s.path for s in srv.seen] == ["/server_info", "/get_server_info"]


def test_401_without_a_token_is_exit_2_and_names_the_fix(tmp_path):
    with LoopbackServer({"/server_info": Reply(200, {"model_path": "x"})}, require_token="sk-right-token") as srv:
        proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 2, proc.stderr
    assert "401" in proc.stderr and "--api-key" in proc.stderr and "KVCHECK_API_KEY" in proc.stderr


def test_401_with_a_wrong_token_is_exit_2_and_the_token_is_not_printed(tmp_path):
    with LoopbackServer({"/server_info": Reply(200, {"model_path": "x"})}, require_token="sk-right-token") as srv:
        proc = _preflight(tmp_path, srv.url, "--api-key", "sk-wrong-token-XYZ")
        assert srv.seen[0].headers.get("Authorization") == "Bearer sk-wrong-token-XYZ"
    assert proc.returncode == 2
    assert "was refused" in proc.stderr
    assert "sk-wrong-token-XYZ" not in proc.stderr + proc.stdout


def test_snapshot_of_an_unreachable_server_is_exit_3_and_writes_nothing(tmp_path):
    out = tmp_path / "snap.json"
    proc = run_cli("snapshot", f"http://127.0.0.1:{free_port()}", "-o", str(out), "--deadline", "0.5")
    assert proc.returncode == 3
    assert not out.exists()


def test_bad_url_is_exit_2(tmp_path):
    proc = _preflight(tmp_path, "http://127.0.0.1:notaport")
    assert proc.returncode == 2
    assert "not a valid URL" in proc.stderr


# ---- in-process, with a recording transport: what kvcheck sends ------------------------


def _mock(calls: list, route_replies: list[int]):
    info = {"model_path": "/nowhere", "version": "0.5.23", "disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 8998, "port": 30000, "api_key": "sk-in-info"}

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.url.host, request.url.port, request.url.path, dict(request.url.params), request.headers.get("authorization")))
        if request.url.path == "/server_info":
            return httpx.Response(200, json=info)
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "/nowhere", "architectures": ["LlamaForCausalLM"], "disaggregation_mode": "prefill"})
        if request.url.path == "/route":
            status = route_replies.pop(0) if route_replies else 200
            if status == 503:
                return httpx.Response(503, text="Prefill server not fully registered yet (1 workers registered).")
            return httpx.Response(200, json={"attn_tp_size": 1, "attn_cp_size": 1, "dp_size": 1, "pp_size": 1, "page_size": 16, "kv_cache_dtype": "auto"})
        return httpx.Response(404)

    return httpx.MockTransport(handler)


def test_only_gets_are_sent_503_is_retried_and_the_token_stays_with_the_http_server():
    calls: list = []
    snap = capture("http://prefill.example:30000", "prefill", api_key="sk-cli", transport=_mock(calls, [503, 503]), deadline=5)
    assert {c[0] for c in calls} == {"GET"}
    routes = [c for c in calls if c[3] == "/route"]
    assert len(routes) == 3  # two 503s, then the topology
    assert routes[0][1:3] == ("prefill.example", 8998)
    assert routes[0][4] == {"prefill_dp_rank": "-1", "prefill_cp_rank": "-1", "target_tp_rank": "-1", "target_pp_rank": "-1"}
    assert all(c[5] is None for c in routes), "the bearer token must not go to the bootstrap server"
    assert all(c[5] == "Bearer sk-cli" for c in calls if c[3] != "/route")
    assert snap["route"]["page_size"] == 16
    assert snap["server_info"]["api_key"] == "<redacted>"


def test_route_503_until_the_deadline_is_reported_as_not_fully_registered():
    with pytest.raises(LiveSourceError) as err:
        capture("http://prefill.example:30000", "prefill", transport=_mock([], [503] * 100), deadline=1.0)
    assert err.value.exit_code == 3
    assert "not fully registered" in str(err.value) and "(1 workers registered)" in str(err.value)


def test_bootstrap_override_is_used():
    calls: list = []
    capture("http://prefill.example:30000", "prefill", bootstrap="http://bootstrap.example:9100", transport=_mock(calls, []))
    assert [c[1:3] for c in calls if c[3] == "/route"] == [("bootstrap.example", 9100)]


def test_non_positive_deadline_is_input_error():
    with pytest.raises(InputError):
        capture("http://prefill.example:30000", "prefill", deadline=0)


def _json_error_only(stdout: str, code: int) -> bool:
    """stdout holds only kvcheck's JSON error object (``{"error": ..., "exit_code": N}``)."""
    import json

    body = json.loads(stdout)
    return body["exit_code"] == code and "verdict" not in body and set(body) == {"error", "exit_code"}
