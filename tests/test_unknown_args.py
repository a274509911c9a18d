"""A server whose args kvcheck cannot all read (a ``--config`` file inside the image, one
SGLang refuses) never feeds a check with guessed values.

SGLang 0.5.23 merges a ``--config`` file before the line (``ConfigArgumentMerger.
merge_config_with_args`` in ``sglang/srt/utils/server_args_config_parser.py``: the file's
args first, the line's after them, so the line wins): a flag the line gives is known, any
other may be in the file. Each test shows both answers the unread file can give (a local
copy passed with ``--config-file``, read as the runtime reads it), so the verdict without
it can only be ``unchecked``: never a pass, never a failure computed from SGLang's
defaults for a server the report says is not checked.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvcheck.cli import app

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LAUNCH = f"python3 -m sglang.launch_server --model-path {MODEL}"
PREFILL = f"{LAUNCH} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000"
IMAGE_CONFIG = "/etc/sglang/decode.yaml"


def _run(tmp, script: str, *extra: str) -> tuple[int, dict, set[str]]:
    (tmp / "run.sh").write_text(script)
    res = CliRunner().invoke(
        app,
        ["preflight", "-f", str(tmp / "run.sh"), "--sglang-version", "0.5.23", "--gpu", "h100", "-o", "json", *extra],
        catch_exceptions=False,
    )
    report = json.loads(res.stdout)
    sev = {f["id"]: f["severity"] for f in report["findings"]}
    for pr in report.get("pairs") or []:
        sev.update({f["id"]: f["severity"] for f in pr["findings"]})
    return res.exit_code, sev, {i["role"] for i in report["instances"]}


def _copy(tmp, text: str) -> str:
    (tmp / "decode.yaml").write_text(text)
    return f"{IMAGE_CONFIG}={tmp / 'decode.yaml'}"


def test_a_role_in_a_config_file_not_read_is_no_missing_role_failure(tmp_path):
    script = f"{PREFILL} &\n{LAUNCH} --page-size 16 --port 30001 --config {IMAGE_CONFIG} &\n"
    rc, sev, roles = _run(tmp_path, script)
    assert (rc, roles) == (4, {"prefill"})
    assert sev["missing-role"] == "unchecked" and sev["config-not-read"] == "unchecked"
    # what the file may hold: a decode (the pair then passes) or no role at all
    ok = _copy(tmp_path, "disaggregation-mode: decode\ndisaggregation-transfer-backend: nixl\n")
    rc, sev, roles = _run(tmp_path, script, "--config-file", ok)
    assert (rc, roles) == (0, {"prefill", "decode"}) and "missing-role" not in sev


def test_a_backend_in_a_config_file_not_read_is_never_the_default(tmp_path):
    script = f"{PREFILL} &\n{LAUNCH} --disaggregation-mode decode --page-size 16 --port 30001 --config {IMAGE_CONFIG} &\n"
    rc, sev, _ = _run(tmp_path, script)
    # was: one-backend and transfer-backend errors from the default backend (mooncake)
    assert rc == 4 and sev["config-not-read"] == "unchecked"
    assert "one-backend" not in sev and "transfer-backend" not in sev
    rc, sev, _ = _run(tmp_path, script, "--config-file", _copy(tmp_path, "disaggregation-transfer-backend: nixl\n"))
    assert rc == 0 and "transfer-backend" not in sev
    rc, sev, _ = _run(tmp_path, script, "--config-file", _copy(tmp_path, "disaggregation-transfer-backend: mooncake\n"))
    # a Mooncake decode kills the NIXL prefill's bootstrap thread (nixl/conn.py, 0.5.23)
    assert rc == 1 and sev["transfer-backend"] == "error" and sev["one-backend"] == "error"


def test_a_flag_the_line_gives_wins_over_the_file_so_it_is_known(tmp_path):
    # the line's --disaggregation-transfer-backend mooncake comes after the file's args:
    # whatever the file says, the decode runs Mooncake against a NIXL prefill
    decode = f"{LAUNCH} --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16"
    script = f"{PREFILL} &\n{decode} --port 30001 --config {IMAGE_CONFIG} &\n"
    rc, sev, _ = _run(tmp_path, script)
    assert rc == 1 and sev["transfer-backend"] == "error" and sev["one-backend"] == "error"
    rc, sev, _ = _run(tmp_path, script, "--config-file", _copy(tmp_path, "disaggregation-transfer-backend: nixl\n"))
    assert rc == 1 and sev["transfer-backend"] == "error"


def test_ports_in_a_config_file_not_read_clash_with_nothing(tmp_path):
    # two prefills on one host: the second's ports may be in the file (0.5.23's
    # start_disagg_service binds --disaggregation-bootstrap-port, default 8998)
    second = f"ssh node1 {LAUNCH} --disaggregation-mode prefill --port 30002 --config {IMAGE_CONFIG} &\n"
    decode = f"ssh node2 {LAUNCH} --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 &\n"
    script = f"ssh node1 {PREFILL} &\n{second}{decode}"
    rc, sev, _ = _run(tmp_path, script)
    assert rc == 4 and "bootstrap-port-clash" not in sev
    clash = _copy(tmp_path, "disaggregation-transfer-backend: nixl\npage-size: 16\n")
    rc, sev, _ = _run(tmp_path, script, "--config-file", clash)
    assert rc == 1 and sev["bootstrap-port-clash"] == "error"
    apart = _copy(tmp_path, "disaggregation-transfer-backend: nixl\npage-size: 16\ndisaggregation-bootstrap-port: 9000\n")
    rc, sev, _ = _run(tmp_path, script, "--config-file", apart)
    assert rc == 0 and "bootstrap-port-clash" not in sev


def test_a_refused_config_keeps_the_role_it_names_and_the_server_refuses_to_start(tmp_path):
    # 0.5.23's _convert_config_to_args turns the unknown key into `--tensor-parallel-degree 2`
    # and argparse refuses it: the decode exits at start-up (not a missing decode)
    (tmp_path / "d.yaml").write_text("disaggregation-mode: decode\ntensor-parallel-degree: 2\n")
    script = f"{PREFILL} &\n{LAUNCH} --disaggregation-transfer-backend nixl --port 30001 --config d.yaml &\n"
    rc, sev, roles = _run(tmp_path, script)
    assert (rc, roles) == (1, {"prefill", "decode"}) and "missing-role" not in sev
    assert sev["config-refused"] == "unchecked" and sev["startup-argparse"] == "error"
