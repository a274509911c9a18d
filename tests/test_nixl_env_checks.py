"""The NIXL environment each side starts with (backend plugin and its parameters).

The runtime parses SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS with json.loads in
NixlKVManager.__init__ (SGLang 0.5.23), so the exact start-up error is json's own text,
and the not-an-object error is the literal in that function (checked against the
installed SGLang's source where it is present).
"""

from __future__ import annotations

import inspect
import json

import pytest

from helpers import run_cli, write_config

PREFILL = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16}
DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


def _run(tmp_path, decode_env: str):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    env = tmp_path / "decode.env"
    env.write_text(decode_env)
    proc = run_cli("preflight", "-p", str(p), "-d", str(d), "--decode-env", str(env), "--format", "json")
    return proc.returncode, json.loads(proc.stdout)


def test_backend_params_that_are_not_json_fail_at_start_up(tmp_path):
    rc, report = _run(tmp_path, "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{not json'\n")
    f = next(f for f in report["findings"] if f["id"] == "nixl-backend-params")
    with pytest.raises(json.JSONDecodeError) as exc:
        json.loads("{not json")
    assert f["runtime_error"]["message"] == str(exc.value)
    assert f["runtime_error"]["when"] == "start-up" and rc == 1


def test_backend_params_with_a_number_value_fail_at_start_up(tmp_path):
    rc, report = _run(tmp_path, "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{\"num_threads\": 8}'\n")
    f = next(f for f in report["findings"] if f["id"] == "nixl-backend-params")
    assert f["runtime_error"]["type"] == "ValueError" and rc == 1
    conn = pytest.importorskip("sglang.srt.disaggregation.nixl.conn")
    source = " ".join(inspect.getsource(conn.NixlKVManager.__init__).split())
    assert '"SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS must be a JSON object " "with string keys and string values"' in source
    assert f["runtime_error"]["message"] == "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS must be a JSON object with string keys and string values"


def test_different_backends_on_the_two_sides(tmp_path):
    rc, report = _run(tmp_path, "SGLANG_DISAGGREGATION_NIXL_BACKEND=LIBFABRIC\n")
    assert rc == 1
    f = next(f for f in report["findings"] if f["id"] == "nixl-backend")
    assert "prefill SGLANG_DISAGGREGATION_NIXL_BACKEND=UCX" in f["message"] and "LIBFABRIC" in f["message"]


def test_unknown_backend_name(tmp_path):
    rc, report = _run(tmp_path, "SGLANG_DISAGGREGATION_NIXL_BACKEND=UCXX\n")
    messages = [f["message"] for f in report["findings"] if f["id"] == "nixl-backend"]
    assert any("UCXX is not a NIXL backend plugin" in m and "did you mean UCX" in m for m in messages)


def test_runtime_default_backend_is_ucx():
    envs = pytest.importorskip("sglang.srt.environ").envs
    from kvcheck.checks.nixl_env import DEFAULT_BACKEND

    assert envs.SGLANG_DISAGGREGATION_NIXL_BACKEND.default == DEFAULT_BACKEND
