"""explain never prints a secret value the log (or the pasted message) marks itself."""

from __future__ import annotations

from tests.helpers import run_cli

# A prefill's log of our own: SGLang prints its ServerArgs (secrets in it as the dataclass
# repr writes them), and a traceback whose message quotes the key
LOG = """\
[2026-01-05 09:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', api_key='k3y-Prefill-41', admin_api_key='adm-Pass-7731', disaggregation_mode='prefill', page_size=1)
[2026-01-05 09:00:02 TP0] Traceback (most recent call last):
[2026-01-05 09:00:02 TP0]   File "/usr/local/lib/python3.12/dist-packages/sglang/srt/disaggregation/mooncake/conn.py", line 300, in bootstrap_thread
[2026-01-05 09:00:02 TP0] KeyError: 'k3y-Prefill-41'
"""
SECRETS = ("k3y-Prefill-41", "adm-Pass-7731")


def test_a_logs_own_server_args_secrets_are_never_printed(tmp_path):
    """``api_key='X'`` in a ServerArgs dump is no ``--flag X``, no token shape and no URL:
    the output scrub missed it, so the JSON report's timeline and engine example printed the
    API keys and the traceback's message printed the key again (table and JSON)."""
    log = tmp_path / "prefill.log"
    log.write_text(LOG)
    for fmt in ("table", "json"):
        proc = run_cli("explain", "--log", str(log), "-o", fmt)
        assert proc.returncode == 0, proc.stderr
        assert "KeyError" in proc.stdout and "<redacted>" in proc.stdout
        assert not [s for s in SECRETS if s in proc.stdout + proc.stderr], proc.stdout
    proc = run_cli("explain", "admin_api_key='adm-Pass-7731' KeyError: 'adm-Pass-7731'")
    assert "adm-Pass-7731" not in proc.stdout + proc.stderr


def test_a_secret_cut_by_a_clipped_line_leaves_no_prefix(tmp_path):
    """SGLang 0.5.23 logs ``server_args={...}`` (``_server_args_for_logging``: the resolved
    dict, ``'api_key': 'X'`` as is). The timeline keeps the first 200 characters of that
    line: with the key straddling the cut, the clipped prefix was no longer the registered
    value nor a token shape, and the JSON printed it. A log of our own, the key placed
    across character 200."""
    key = "Kv9-decode-api-Secret-77aa41-and-more-of-it"
    head = (
        "[2026-01-05 09:00:00] server_args={'model_path': 'Qwen/Qwen3-8B', "
        "'disaggregation_mode': 'decode', 'disaggregation_transfer_backend': 'nixl', 'page_size': 16, 'api_key': '"
    )
    assert len(head) < 200 < len(head) + len(key)
    log = tmp_path / "decode.log"
    log.write_text(
        head + key + "', 'port': 30000}\n"
        "[2026-01-05 09:01:00 TP0] Decode handshake failed for request rank=0 decode_req.req.rid='r1' "
        "decode_req.req.bootstrap_room=5 with exception KVTransferError(bootstrap_room=5): "
        "Failed to get kvcache from prefill instance, it might be dead\n"
    )
    for fmt in ("table", "json"):
        proc = run_cli("explain", "--log", str(log), "-o", fmt)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout + proc.stderr
        assert "server_args=" in out or fmt == "table"
        assert key[:8] not in out, [ln for ln in out.splitlines() if key[:8] in ln]


def test_an_exceptions_name_is_no_secret_named_key():
    """``KeyError: 'kv_args_key'`` (a traceback's last line) read as the field ``KeyError``
    holding a secret: the key a lookup missed printed as <redacted>, and, since a log's
    lines are scrubbed before they are read, no rule could see it either. A token in an
    exception's message is still a token."""
    proc = run_cli("explain", "KeyError: 'kv_args_key'")
    assert "kv_args_key" in proc.stdout, proc.stdout
    proc = run_cli("explain", "PermissionError: token hf_AbCdEfGhIjKlMnOpQrStUv0123 rejected", "-o", "json")
    assert "hf_AbCdEfGhIjKlMnOpQrStUv0123" not in proc.stdout + proc.stderr


def test_a_count_under_a_token_name_is_no_secret(tmp_path):
    """SGLang's decode prints ``Decode batch. #running-req: N, #token: N, ...``: the count
    under ``#token`` was registered as a secret, and every occurrence of its digits was
    scrubbed, the room id of the failure below included. A number is a secret only under a
    password/secret/api-key name, as for a structured value."""
    log = tmp_path / "decode.log"
    log.write_text(
        "[2026-01-05 09:00:00 TP0] Decode batch. #running-req: 31, #token: 88421, token usage: 0.42, "
        "gen throughput (token/s): 2043.11, #queue-req: 0\n"
        "[2026-01-05 09:00:01 TP0] NIXL transport error for room 8842113377: NIXL_ERR_REMOTE_DISCONNECT\n"
    )
    proc = run_cli("explain", "--log", str(log), "-o", "json")
    assert proc.returncode == 0 and "8842113377" in proc.stdout and "<redacted>" not in proc.stdout
    proc = run_cli("explain", "password: 123456 KeyError: 'x'")
    assert "123456" not in proc.stdout + proc.stderr
