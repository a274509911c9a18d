"""Redaction by value, everywhere: a corpus of secret shapes served by real loopback
servers (``/server_info``, ``/model_info``, the bootstrap ``/route``, a 503 body), and
given in files; no secret value may reach any output (table, JSON, JUnit, GitHub
annotations), snapshot file, finding or error line.

The shapes are those issue 10 found leaking: fields named ``hftoken``, ``dbpassword``,
``token_for_hub``, ``api_keys: [...]``; a URL password without a user
(``redis://:pw@``); JSON inside a string (SGLang's
``hicache_storage_backend_extra_config`` with ``aws_secret_access_key``); a secret
echoed by ``/model_info`` and by ``/route`` (``ssl_keyfile_password`` reaching the
``live-route`` finding); a 503 body.
"""

from __future__ import annotations

import json

import pytest
from helpers import model_dir, run_cli, write_config
from live_http import LoopbackServer, Reply

from kvcheck.sources.redact import REDACTED, clear_registry, collect_secrets, is_secret_key, redact, scrub

API_KEY = "sk-corpus-API-0001"
ADMIN = "adm-corpus-0002"
SSL_PW = "sslpw-corpus-0003"
HF = "hf_corpusTOKEN0004"
DB = "dbpw-corpus-0005"
HUB = "hub-corpus-0006"
LISTED = ("listed-corpus-0007", "listed-corpus-0008")
REDIS_PW = "redispw-corpus-0009"
AWS = "aws-corpus-SECRET-0010"
BODY = "body-corpus-0011"
SECRETS = (API_KEY, ADMIN, SSL_PW, HF, DB, HUB, *LISTED, REDIS_PW, AWS, BODY)
DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


@pytest.fixture(autouse=True)
def _fresh_registry():
    clear_registry()
    yield
    clear_registry()


def _server_info(boot_port: int) -> dict:
    return {
        "model_path": str(model_dir("llama-3.1-8b")),
        "version": "0.5.23",
        "disaggregation_mode": "prefill",
        "disaggregation_transfer_backend": "nixl",
        "disaggregation_bootstrap_port": boot_port,
        "page_size": 16,
        "api_key": API_KEY,
        "admin_api_key": ADMIN,
        "ssl_keyfile_password": SSL_PW,
        "hftoken": HF,
        "dbpassword": DB,
        "token_for_hub": HUB,
        "api_keys": list(LISTED),
        "hicache_storage_backend": "file",
        "hicache_storage_backend_extra_config": json.dumps({"bucket": "kv", "aws_secret_access_key": AWS, "redis_url": f"redis://:{REDIS_PW}@cache:6379/0"}),
        "launch_command": f"python -m sglang.launch_server --api-key {API_KEY} --ssl-keyfile-password={SSL_PW}",
    }


def _outputs(tmp_path, srv_url: str) -> list[str]:
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    outs = []
    for fmt in ("table", "json", "junit", "github"):
        proc = run_cli("preflight", "--prefill", srv_url, "--decode", str(d), "--format", fmt, "--deadline", "20")
        assert proc.returncode in (0, 1), proc.stderr
        outs += [proc.stdout, proc.stderr]
    snap = tmp_path / "snap.json"
    proc = run_cli("snapshot", srv_url, "-o", str(snap), "--deadline", "20")
    assert proc.returncode == 0, proc.stderr
    outs += [proc.stdout, proc.stderr, snap.read_text()]
    proc = run_cli("preflight", "--prefill", str(snap), "--decode", str(d), "--format", "json")
    outs += [proc.stdout, proc.stderr]
    return outs


def test_no_secret_shape_reaches_any_output_format_or_snapshot(tmp_path):
    # /route echoes the SSL password as its kv-cache dtype: a live-route finding quotes it.
    route = {"attn_tp_size": 1, "attn_cp_size": 1, "dp_size": 1, "pp_size": 1, "page_size": 16, "kv_cache_dtype": SSL_PW, "prefill_http_port": None}
    with LoopbackServer({"/route": Reply(200, route)}) as boot:
        model_info = {"model_path": str(model_dir("llama-3.1-8b")), "served_model_name": f"llama ({HF})", "architectures": ["LlamaForCausalLM"], "disaggregation_mode": "prefill"}
        with LoopbackServer({"/server_info": Reply(200, _server_info(boot.port)), "/model_info": Reply(200, model_info)}) as srv:
            outs = _outputs(tmp_path, srv.url)
    text = "\n".join(outs)
    assert "live-route" in text  # the finding that used to carry the password is there
    assert REDACTED in text
    for secret in SECRETS:
        if secret == BODY:
            continue
        assert secret not in text, secret


def test_a_503_body_is_never_printed(tmp_path):
    body = f"upstream said: token={BODY} and the key {API_KEY}"
    with LoopbackServer({"/route": Reply(503, body, content_type="text/plain")}) as boot:
        with LoopbackServer({"/server_info": Reply(200, _server_info(boot.port))}) as srv:
            d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
            proc = run_cli("preflight", "--prefill", srv.url, "--decode", str(d), "--deadline", "4")
            snap = tmp_path / "s.json"
            sproc = run_cli("snapshot", srv.url, "-o", str(snap), "--deadline", "4")
    assert proc.returncode == 3 and sproc.returncode == 0, (proc.stderr, sproc.stderr)
    text = proc.stdout + proc.stderr + sproc.stderr + snap.read_text()
    assert "503" in proc.stderr
    assert BODY not in text and "upstream said" not in text and API_KEY not in text


def test_secrets_given_in_files_are_scrubbed_from_every_output(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {
        "disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16,
        "api-key": API_KEY, "ssl-keyfile-password": SSL_PW,
    })
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    for fmt in ("table", "json", "junit", "github"):
        proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", fmt)
        assert proc.returncode in (0, 1), proc.stderr
        assert API_KEY not in proc.stdout + proc.stderr and SSL_PW not in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", [
    "hftoken", "HF_TOKEN", "hf-token", "HfToken", "dbpassword", "DB_PASSWD", "token_for_hub", "api_keys", "apiKey",
    "aws_secret_access_key", "AWS_ACCESS_KEY_ID", "client_secret", "ssl_keyfile_password", "Authorization", "auth", "oauth_token",
    "private_key", "credentials", "session_cookie", "mysql_pwd",
])
def test_secret_names_in_any_spelling(name):
    assert is_secret_key(name)


@pytest.mark.parametrize("name", [
    "max_total_tokens", "tokenizer_path", "tokenizer_mode", "speculative_token_map", "speculative_num_draft_tokens", "ssl_keyfile",
    "ssl_certfile", "num_key_value_heads", "bucket_time_to_first_token", "num_reserved_decode_tokens", "author", "page_size",
    "skip_tokenizer_init", "bucket_inter_token_latency",
])
def test_field_names_that_are_not_secrets(name):
    assert not is_secret_key(name)


def test_collect_finds_every_shape_and_scrub_removes_them_from_any_text():
    obj = {
        "hftoken": HF,
        "nested": [{"dbpassword": DB}],
        "api_keys": list(LISTED),
        "redis": f"redis://:{REDIS_PW}@cache:6379",
        "extra": json.dumps({"aws_secret_access_key": AWS}),
        "cmd": f"serve --hf-token {HUB}",
        "header": f"Authorization: Bearer {API_KEY}",
        "max_total_tokens": 4096,
        "tokenizer_path": "/models/llama",
    }
    found = collect_secrets(obj)
    assert {HF, DB, *LISTED, REDIS_PW, AWS, HUB, API_KEY} <= found
    assert "4096" not in found and "/models/llama" not in found
    out = json.dumps(redact(obj))
    for s in (HF, DB, *LISTED, REDIS_PW, AWS, HUB, API_KEY):
        assert s not in out
    assert "/models/llama" in out and "4096" in out
    # once seen, a value is scrubbed from unrelated text too (the process-wide registry)
    assert scrub(f"error: model {HF} not found; db {DB}") == f"error: model {REDACTED} not found; db {REDACTED}"
    assert scrub("redis://:hunter22@h:1/0") == f"redis://:{REDACTED}@h:1/0"
