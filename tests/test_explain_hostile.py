"""explain on hostile and odd logs (logs pasted from anywhere, logs of untrusted pull
requests in CI): escape sequences come back as visible text, near-miss lines cost one
pass, compressed and UTF-16 logs are read, binary data and compression bombs are exit 2,
and no file a log names is opened. Logs of our own. Times are measured in
benchmarks/bench_explain_hostile.py, never asserted here."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import subprocess
import sys

import pytest
from helpers import REPO

from kvcheck.errors import InputError
from kvcheck.explain import scan
from kvcheck.explain.formats import _compile
from kvcheck.explain.matcher import explain_blocks, iter_log_blocks
from kvcheck.explain.scan import open_log_text

REGION = "ValueError: NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry"
ESC = "\x1b"
HOSTILE = (
    f"[2026-03-01 10:00:00 TP0] ERROR {ESC}]52;c;ZWNobyBwd25lZA==\x07 {ESC}]0;retitled\x07 "
    f"{ESC}]8;;http://example.invalid/\x07link{ESC}]8;;\x07 {ESC}[2J{ESC}[1A\u202eevil\u202c\n"
    f"RuntimeError: peer said {ESC}]0;x\x07 and \u202egnp.exe\n"
)


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvcheck", "explain", *args], input=stdin, capture_output=True, cwd=REPO
    )


def _strings(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def test_a_logs_escape_sequences_come_back_as_visible_text_in_table_and_json(tmp_path):
    log = tmp_path / "hostile.log"
    log.write_text(HOSTILE, encoding="utf-8")
    table = _cli("--log", str(log))
    assert table.returncode in (0, 1), table.stderr
    assert b"\x07" not in table.stdout and "\u202e".encode() not in table.stdout
    assert b"\x1b]" not in table.stdout  # no OSC (SGR colour alone may be kvcheck's own)
    assert b"\\x1b]0;x\\x07" in table.stdout  # the line's text, shown escaped
    js = _cli("--log", str(log), "-o", "json")
    data = json.loads(js.stdout)
    values = list(_strings(data))
    assert not [v for v in values if any(c in v for c in ("\x1b", "\x07", "\u202e", "\u202c"))]
    assert any("\\x1b]0;x\\x07" in v for v in values)  # jq -r prints it as text


@pytest.mark.parametrize(
    "parts, text, groups",
    [
        # a field's value ends where the literal after it first occurs *with* its blank
        (
            ["Unable to connect endpoint ", ": ", ""],
            "Unable to connect endpoint 10.0.0.2:15960@mlx5_4: Bad: y",
            ("10.0.0.2:15960@mlx5_4", "Bad: y"),
        ),
        # an empty value between two blank-edged literals: two blanks or more
        (["Alpha beta gamma ", " delta epsilon", ""], "Alpha beta gamma  delta epsilon", ("", "")),
        (["Alpha beta gamma ", " delta epsilon", ""], "Alpha beta gamma delta epsilon", None),
        (["Alpha beta gamma ", " delta epsilon", ""], "Alpha beta gamma  x delta epsilon", ("x", "")),
        (["", " has invalid choices ", ""], "foo has invalid choices bar", ("foo", "bar")),
        (["", " has invalid choices ", ""], "   has invalid choices  x", ("", "x")),
    ],
)
def test_a_format_matches_as_its_regex_would(parts, text, groups):
    m = _compile(parts).search(text)
    assert (m.groups() if m else None) == groups


@pytest.mark.parametrize("unit", ["has invalid ", "failed ", "failed for key ", " ", "a ", "a", "sglang_", "monkey="])
def test_a_line_of_near_miss_repeats_is_read_in_one_pass(unit):
    """8 KB of a format's words repeated without its whole text, of letters, of an image
    name's word: before, each of the 64 candidate formats backtracked over every start and
    field end (past 60 s for one line), the two-words test ran once per letter (0.5 s a
    line), the image-tag regex once per start and 'sglang' (minutes a line); nothing matches
    in full, and the line is read."""
    line = "ValueError: " + unit * (8000 // len(unit))
    result = explain_blocks(iter_log_blocks(io.BytesIO((line + "\n" + REGION + "\n").encode())))
    assert [h.entry_id for h in result.hits] == ["region-count"]


def _plain_hits(data: bytes):
    return [(h.entry_id, h.first_line) for h in explain_blocks(iter_log_blocks(open_log_text(io.BytesIO(data)))).hits]


@pytest.mark.parametrize(
    "encode",
    [
        gzip.compress,
        bz2.compress,
        lzma.compress,
        lambda b: b.decode().encode("utf-16"),  # with its byte-order mark (a Windows copy)
        lambda b: b.decode().encode("utf-16-le"),  # without one
        lambda b: b.decode().encode("utf-16-be"),
        lambda b: b.decode().encode("utf-32"),
        lambda b: b"\xef\xbb\xbf" + b,
    ],
)
def test_compressed_and_utf16_logs_are_read_as_the_plain_log(encode):
    plain = ("noise line\n" + REGION + "\n").encode()
    assert _plain_hits(encode(plain)) == _plain_hits(plain) == [("region-count", 2)]


def test_a_crash_logs_nul_hole_is_text_not_binary():
    data = b"before the crash\n" + b"\x00" * 50_000 + b"\n" + REGION.encode() + b"\n"
    assert _plain_hits(data) == [("region-count", 3)]


@pytest.mark.parametrize(
    "data, said",
    [
        (bytes(range(256)) * 64, "binary data"),
        (b"\x28\xb5\x2f\xfd" + b"x" * 100, "zstd"),
        (b"PK\x03\x04" + b"x" * 100, "zip"),
    ],
)
def test_binary_and_unreadable_compression_are_exit_2(tmp_path, data, said):
    log = tmp_path / "x.log"
    log.write_bytes(data)
    proc = _cli("--log", str(log))
    assert proc.returncode == 2 and said in proc.stderr.decode() and b"Traceback" not in proc.stderr


def test_a_compression_bomb_is_refused_before_it_is_read(monkeypatch):
    monkeypatch.setattr(scan, "INFLATION_FREE", 1 << 16)
    bomb = gzip.compress(b"\n" * (8 << 20), 9)  # 8 MiB of blank lines in ~8 KB
    with pytest.raises(InputError, match="inflates more than"):
        explain_blocks(iter_log_blocks(open_log_text(io.BytesIO(bomb), "bomb.gz")))


def test_a_corrupt_gzip_is_exit_2(tmp_path):
    log = tmp_path / "x.log.gz"
    log.write_bytes(gzip.compress(("x\n" * 1000).encode())[:40] + b"\xff" * 64)
    proc = _cli("--log", str(log))
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc.stderr


def test_a_log_naming_local_files_never_opens_them(tmp_path):
    """A traceback's frames, an import error and a missing-file error name paths; explain
    reads none of them (an audit hook records every open of the process)."""
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE-KEY-CONTENT-1234\n")
    log = tmp_path / "paths.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        f'  File "{secret}", line 1, in <module>\n'
        f'  File "{tmp_path}/shadow.py", line 2, in load_model\n'
        f"ImportError: {secret}: cannot open shared object file: No such file or directory\n"
        f"FileNotFoundError: [Errno 2] No such file or directory: '{secret}'\n"
    )
    code = (
        "import sys\n"
        f"watched = {str(tmp_path)!r}\n"
        "opened = []\n"
        "def hook(event, args):\n"
        "    if event == 'open' and args and isinstance(args[0], str) and args[0].startswith(watched):\n"
        "        opened.append(args[0])\n"
        "sys.addaudithook(hook)\n"
        "from kvcheck.cli import main\n"
        f"sys.argv = ['kvcheck', 'explain', '--log', {str(log)!r}, '-o', 'json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('OPENED=' + repr(opened))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert f"OPENED={[str(log)]!r}" in proc.stderr, proc.stderr[-2000:]
    assert "PRIVATE-KEY-CONTENT" not in proc.stdout


def test_deep_exception_chains_and_long_recursion_are_read(tmp_path):
    frame = '  File "/usr/lib/python3.12/site-packages/sglang/srt/x.py", line 10, in f\n    return f(x)\n'
    chain = "".join(
        f"Traceback (most recent call last):\n{frame}ValueError: step {i}\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        for i in range(1000)
    )
    log = tmp_path / "deep.log"
    log.write_text(
        chain
        + "Traceback (most recent call last):\n"
        + frame * 1000
        + "  [Previous line repeated 996 more times]\nRecursionError: maximum recursion depth exceeded\n"
    )
    proc = _cli("--log", str(log), "-o", "json")
    assert proc.returncode in (0, 1) and b"Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["lines"] > 5000


SECRETS = {
    "EtcdUserPw11": "RuntimeError: etcdctl --user root:EtcdUserPw11 --endpoints http://10.0.0.1:2379 failed",
    "EtcdCtlPw22": "RuntimeError: ETCDCTL_PASSWORD=EtcdCtlPw22 rejected",
    "SessionTok33": "ValueError: s3 access failed: AWS_SESSION_TOKEN=FwoGZXIvYXdzSessionTok33",
    "HeaderTok44": "ConnectionError: Authorization header 'token abcdefHeaderTok44' rejected",
    "RedisPw55": "RuntimeError: Failed to connect to redis at rediss://:RedisPw55@cache:6380",
    "MoonPw66": "ValueError: mooncake config {'metadata_server': 'etcd://admin:MoonPw66@h:2379'}",
    "hf_Plain77": "OSError: 401 Client Error. Invalid credentials hf_Plain77abcdefghijklmnopq",
    "AKIAIOSFODNN7": "ValueError: key AKIAIOSFODNN7EXAMPLE rejected",
}


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_logs_credentials_are_never_printed(tmp_path, fmt):
    """Credentials written as a flag's user:password, a KEY=VALUE inside an exception's
    message, an Authorization header quoted loosely, a URL, a token shape: none is echoed
    in any output, whichever line or field quotes it."""
    log = tmp_path / "creds.log"
    log.write_text("\n".join(SECRETS.values()) + "\n")
    proc = _cli("--log", str(log), "-o", fmt)
    assert proc.returncode in (0, 1), proc.stderr
    out = proc.stdout.decode() + proc.stderr.decode()
    assert "<redacted>" in out
    assert [s for s in SECRETS if s in out] == []


def test_preflight_json_values_carry_no_escape_sequences(tmp_path):
    """The same kind on preflight's JSON: an input's escape sequences come back as
    visible text in every value, not as the raw bytes ``jq -r`` would print."""
    f = tmp_path / "esc.sh"
    f.write_text(
        "python -m sglang.launch_server --model-path '/m/x\x1b]0;pwned\x07\u202e' --disaggregation-mode prefill\n"
        "python -m sglang.launch_server --model-path /m/y --disaggregation-mode decode --port 30001\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kvcheck", "preflight", "-f", str(f), "-o", "json"], capture_output=True, cwd=REPO
    )
    values = list(_strings(json.loads(proc.stdout)))
    assert not [v for v in values if any(c in v for c in ("\x1b", "\x07", "\u202e"))]
    assert any("\\x1b]0;pwned\\x07" in v for v in values)
