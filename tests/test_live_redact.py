"""Redaction of secrets from server info, command lines, URLs and snapshot files."""

from __future__ import annotations

import json

from helpers import run_cli

from kvcheck.sources.redact import REDACTED, is_secret_key, redact, redact_url, scrub


def test_secret_names_are_matched_by_whole_words_not_substrings():
    for name in ("api_key", "admin_api_key", "ssl_keyfile_password", "hf_token", "accessToken", "client-secret", "db_password", "watermark_key_b"):
        assert is_secret_key(name), name
    for name in ("max_total_tokens", "tokenizer_path", "speculative_num_draft_tokens", "speculative_token_map", "ssl_keyfile", "ssl_certfile", "page_size", "num_reserved_decode_tokens"):
        assert not is_secret_key(name), name


def test_redact_replaces_values_at_any_depth_and_scrubs_them_from_other_strings():
    info = {
        "api_key": "sk-abc123",
        "admin_api_key": None,
        "ssl_keyfile_password": "",
        "launch_command": "sglang serve --api-key sk-abc123 --admin-api-key=ADM1N --hf-token tok0 --page-size 16",
        "internal_states": [{"nested": {"auth_token": "tkn-999"}, "note": "token tkn-999 used"}],
        "bucket_time_to_first_token": [0.1, 0.5],
        "max_total_tokens": 4096,
    }
    out = redact(info)
    assert out["api_key"] == REDACTED
    assert out["admin_api_key"] is None and out["ssl_keyfile_password"] == ""  # unset stays visible
    assert out["launch_command"] == f"sglang serve --api-key {REDACTED} --admin-api-key={REDACTED} --hf-token {REDACTED} --page-size 16"
    assert out["internal_states"][0]["nested"]["auth_token"] == REDACTED
    assert out["internal_states"][0]["note"] == f"token {REDACTED} used"
    assert out["bucket_time_to_first_token"] == [0.1, 0.5] and out["max_total_tokens"] == 4096
    assert info["api_key"] == "sk-abc123"  # a copy


def test_extra_secrets_and_urls():
    assert scrub("Bearer sk-from-cli failed", ["sk-from-cli"]) == f"Bearer {REDACTED} failed"
    assert redact_url("https://ops:hunter22@prefill:30000/x?token=abc&page=1") == f"https://ops:{REDACTED}@prefill:30000/x?token={REDACTED}&page=1"


def test_a_snapshot_file_is_redacted_again_when_read_and_broken_ones_are_exit_2(tmp_path):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"server_info": "not an object"}))
    proc = run_cli("preflight", "--prefill", str(snap), "--decode", str(snap))
    assert proc.returncode == 2 and "server_info" in proc.stderr
