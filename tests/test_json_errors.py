"""With ``-o json`` a run that stops on kvcheck's own bad input still prints one JSON
object on stdout (exit 2), so a CI step that parses stdout reads why nothing was checked."""

from __future__ import annotations

import json

from tests.helpers import run_cli


def test_missing_file_is_a_json_error_object(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = run_cli("preflight", "-f", str(missing), "-o", "json")
    body = json.loads(proc.stdout)
    assert proc.returncode == 2 and body["exit_code"] == 2 and "verdict" not in body
    assert body["error"]["message"].endswith("file not found") and body["error"]["source"] == str(missing)
    assert "file not found" in proc.stderr


def test_terminal_output_prints_nothing_on_stdout(tmp_path):
    proc = run_cli("preflight", "-f", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and proc.stdout == ""
