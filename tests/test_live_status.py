"""Statuses that match the fault, for live sources: malformed server JSON of every kind
(deeply nested -> RecursionError, invalid UTF-8, ``null``, a list, truncated) is exit 3
with the URL and one clear line, never exit 2 with a bare ``RecursionError`` or
``ValueError``; a huge value is clipped in the message; ``host:port`` without a scheme
is a live server."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli, write_config
from live_http import LoopbackServer, Reply, free_port

DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


def _preflight(tmp_path, prefill: str, *extra: str):
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    return run_cli("preflight", "--prefill", prefill, "--decode", str(d), "--format", "json", "--deadline", "20", *extra)


@pytest.mark.parametrize(
    "body, says",
    [
        (b"[" * 100_000 + b"]" * 100_000, "malformed JSON"),
        (b'{"model_path": "' + "/m\u00e9".encode("latin-1") + b'"}', "invalid UTF-8"),
        (b'{"model_path": "/m", "version": "0.5.23"' + b"\xff\xfe", "invalid UTF-8"),
        (b"null", "not SGLang's server info"),
        (b"[1, 2, 3]", "not SGLang's server info"),
        (b'{"model_path": "/m", "x": ' + b"[" * 70 + b"]" * 70 + b"}", "nested deeper than 64"),
        (b"<html>oops</html>", "malformed JSON"),
    ],
    ids=["deep-recursion", "latin-1", "bad-bytes", "null", "list", "deep-under-recursion-limit", "html"],
)
def test_malformed_server_json_is_exit_3_with_the_url(tmp_path, body, says):
    with LoopbackServer({"/server_info": Reply(200, body)}) as srv:
        proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"127.0.0.1:{srv.port}/server_info" in line and says in line, line
    assert "Traceback" not in line and "RecursionError:" not in line


def test_malformed_route_json_is_exit_3(tmp_path):
    from helpers import model_dir

    with LoopbackServer({"/route": Reply(200, b"[" * 50_000)}) as boot:
        info = {"model_path": str(model_dir("llama-3.1-8b")), "version": "0.5.23", "disaggregation_mode": "prefill",
                "disaggregation_transfer_backend": "nixl", "disaggregation_bootstrap_port": boot.port, "page_size": 16}
        with LoopbackServer({"/server_info": Reply(200, info)}) as srv:
            proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 3, proc.stderr
    assert f"127.0.0.1:{boot.port}/route" in proc.stderr and "malformed JSON" in proc.stderr


def test_a_huge_model_path_is_clipped_in_the_message(tmp_path):
    huge = "/models/" + "m" * (5 * 1024 * 1024)  # under the body cap
    with LoopbackServer({"/server_info": Reply(200, {"model_path": huge, "version": "0.5.23", "disaggregation_mode": "decode"})}) as srv:
        proc = _preflight(tmp_path, srv.url)
    assert proc.returncode == 2, proc.stderr[:500]
    assert len(proc.stderr) < 2000
    assert "model_path" in proc.stderr and "chars)" in proc.stderr
    # a 10 MB model-path in a JSON args file
    args = tmp_path / "p.json"
    args.write_text('{"model-path": "/models/' + "m" * (10 * 1024 * 1024) + '", "disaggregation-mode": "prefill"}')
    proc = _preflight(tmp_path, str(args))
    # the pair path reads it as -f does: a model kvcheck cannot find is unknown-model (and
    # this prefill leaves the backend at SGLang's default, mooncake, against a NIXL decode)
    assert proc.returncode == 1, proc.stderr[:500]
    assert "one-backend" in {f["id"] for f in json.loads(proc.stdout)["findings"]}
    (f,) = [f for f in json.loads(proc.stdout)["findings"] if f["id"] == "unknown-model"]
    assert len(f["message"]) < 2000 and "--model-path" in f["message"] and "chars)" in f["message"]


def test_host_port_without_a_scheme_is_a_live_server(tmp_path):
    port = free_port()
    proc = _preflight(tmp_path, f"127.0.0.1:{port}", "--deadline", "1", "--connect-timeout", "0.5")
    assert proc.returncode == 3, proc.stderr
    assert f"http://127.0.0.1:{port}" in proc.stderr and "file not found" not in proc.stderr
    proc = _preflight(tmp_path, f"localhost:{port}", "--deadline", "1", "--connect-timeout", "0.5")
    assert proc.returncode == 3 and "file not found" not in proc.stderr
