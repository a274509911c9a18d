"""kvcheck explain: the catalog recognizes each runtime message, logs give counts and
line numbers, unknown text is 'not recognized' (exit 1), and --prefill/--decode point to
the finding that causes the message. No SGLang needed (see test_explain_runtime.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvcheck.checks import REGISTRY
from kvcheck.explain import EXIT_NOT_RECOGNIZED, EXIT_RECOGNIZED, explain_text, load_catalog
from kvcheck.preflight import all_finding_ids
from tests.helpers import run_cli, write_config

CATALOG = load_catalog()
CASES = sorted(Path(__file__).resolve().parent.parent.parent.joinpath("shared", "cases").glob("*.yaml"))


def test_catalog_loads_with_unique_ids_and_valid_checks():
    ids = [e.id for e in CATALOG.entries]
    assert len(ids) == len(set(ids)) >= 90
    known = set(REGISTRY) | set(all_finding_ids())
    for e in CATALOG.entries:
        assert e.check is None or e.check in known, (e.id, e.check)
        assert e.meaning and e.triggers and e.operator_sees and e.fix
        assert set(e.example) <= set(e.field_names), e.id


@pytest.mark.parametrize("entry", CATALOG.entries, ids=lambda e: e.id)
def test_every_entry_recognizes_its_formatted_text(entry):
    text = entry.example_text()
    result = explain_text(f"{entry.type}: {text}")
    assert result.recognized
    assert entry.id in [h.entry_id for h in result.hits]
    hit = next(h for h in result.hits if h.entry_id == entry.id)
    assert hit.match == "full"
    for name, value in entry.example.items():
        assert hit.values[name] == str(value), (name, hit.values)


@pytest.mark.parametrize("entry", CATALOG.entries, ids=lambda e: e.id)
def test_every_entry_is_found_inside_a_log_line(entry):
    line = f"[2026-01-02 10:11:12 TP0] {entry.example_text()}"
    assert entry.id in [h.entry_id for h in explain_text(line).hits]


def test_catalog_ids_point_to_preflight_ids_used_by_the_lead():
    # Each finding id the transfer checks classify also has a catalog entry.
    checks = {e.check for e in CATALOG.entries}
    for fid in ("page-size-mismatch", "kv-cache-dtype-mismatch", "pp-size-mismatch", "decode-cp-size", "region-count",
                "hisparse-decode-only-spec", "hetero-tp-direct-to-host", "hetero-tp-mixed-kinds", "item-stride", "transfer-backend"):
        assert fid in checks


@pytest.mark.parametrize("case", [c for c in CASES if yaml.safe_load(c.read_text())["expect"].get("runtime_error")], ids=lambda p: p.stem)
def test_handed_case_runtime_errors_are_recognized(case):
    data = yaml.safe_load(case.read_text())
    message = data["expect"]["runtime_error"]
    result = explain_text(message)
    assert result.recognized, message
    entry = CATALOG.get(result.hits[0].entry_id)
    assert entry.check is not None and not entry.generic


def test_no_kv_memory_segments_is_unreachable_and_says_so():
    entry = CATALOG.get("no-kv-memory-segments")
    assert entry.reachable is False and entry.check is None
    assert "not running 0.5.23" in entry.meaning and "patched" in entry.meaning
    assert "HiCache" in entry.meaning
    proc = run_cli("explain", "ValueError: NIXL KV transfer has no KV memory segments")
    assert proc.returncode == 0
    assert "NOT REACHABLE in sglang 0.5.23" in proc.stdout


def test_timeouts_name_their_env_vars_and_300s():
    for eid, env in (("bootstrap-timeout", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"), ("waiting-timeout", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"),
                     ("bootstrap-timeout-warning", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"), ("waiting-timeout-warning", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT")):
        e = CATALOG.get(eid)
        assert env in e.meaning + e.template and "300" in e.meaning + e.triggers + e.operator_sees


def test_log_counts_and_first_last_lines(tmp_path):
    lines = [
        "[10:00:00] INFO server started",
        "[10:00:01 TP0] ERROR prefill bootstrap_thread died on engine_rank=0; requests to this rank will time out in KVPoll.Bootstrapping",
        "Traceback (most recent call last):",
        "ValueError: NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry",
        "[10:05:01] WARNING Some requests timed out when bootstrapping, which means prefill instances fail to receive the KV indices from the decode instance of this request. If a greater mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition. ",
        "[10:05:01] WARNING Prefill bootstrap failed for request rank=0 req.rid='a1' req.bootstrap_room=11 with exception KVTransferError(bootstrap_room=11): Request 11 timed out after 300.1s in KVPoll.Bootstrapping",
        "[10:05:02] INFO decode batch",
        "[10:05:03] WARNING Prefill bootstrap failed for request rank=0 req.rid='a2' req.bootstrap_room=12 with exception KVTransferError(bootstrap_room=12): Request 12 timed out after 300.4s in KVPoll.Bootstrapping",
        "[10:05:09] WARNING Prefill bootstrap failed for request rank=0 req.rid='a3' req.bootstrap_room=13 with exception KVTransferError(bootstrap_room=13): Request 13 timed out after 300.9s in KVPoll.Bootstrapping",
    ]
    log = tmp_path / "prefill.log"
    log.write_text("\n".join(lines) + "\n")
    result = explain_text(log.read_text(), source="log")
    by_id = {h.entry_id: h for h in result.hits}
    assert by_id["region-count"].count == 1 and by_id["region-count"].first_line == 4
    assert by_id["bootstrap-timeout"].count == 3
    assert (by_id["bootstrap-timeout"].first_line, by_id["bootstrap-timeout"].last_line) == (6, 9)
    assert by_id["bootstrap-timeout"].values == {"room": "11", "elapsed": "300.1"}
    assert by_id["bootstrap-timeout-warning"].count == 1
    assert by_id["prefill-bootstrap-failed"].count == 3
    # The specific cause comes before the generic wrappers.
    order = [h.entry_id for h in result.hits]
    assert order.index("region-count") < order.index("bootstrap-thread-died")
    assert order.index("bootstrap-timeout") < order.index("kv-transfer-error")

    proc = run_cli("explain", "--log", str(log), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["recognized"] is True and data["lines"] == len(lines)
    hits = {h["entry_id"]: h for h in data["hits"]}
    assert hits["bootstrap-timeout"]["count"] == 3 and hits["bootstrap-timeout"]["last_line"] == 9
    assert hits["region-count"]["entry"]["check"] == "region-count"

    proc = run_cli("explain", "--log", str(log))
    assert proc.returncode == 0 and "x3, first/last lines 6..9" in proc.stdout


def test_stdin_is_read_as_a_log(tmp_path):
    import subprocess
    import sys

    from tests.helpers import REPO

    text = "x\nAssertionError: ('Decode pp size (4) should be equal to prefill pp size (2) or 1',)\n"
    proc = subprocess.run([sys.executable, "-m", "kvcheck", "explain", "--format", "json"], input=text, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["source"] == "log <stdin>"
    assert data["hits"][0]["entry_id"] == "pp-size-mismatch" and data["hits"][0]["first_line"] == 2
    assert data["hits"][0]["values"] == {"decode": "4", "prefill": "2"}


def test_unknown_message_is_not_recognized_exit_1():
    result = explain_text("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not result.recognized and result.exit_code == EXIT_NOT_RECOGNIZED == 1
    proc = run_cli("explain", "CUDA out of memory. Tried to allocate 2.00 GiB")
    assert proc.returncode == 1
    assert proc.stdout.startswith("not recognized")
    proc = run_cli("explain", "--format", "json", "something else")
    assert proc.returncode == 1 and json.loads(proc.stdout) == {**json.loads(proc.stdout), "recognized": False, "hits": []}


def test_recognized_exit_0_and_bad_input_exit_2(tmp_path):
    assert explain_text("NIXL_ERR_NOT_FOUND").exit_code == EXIT_RECOGNIZED == 0
    assert run_cli("explain", "nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND").returncode == 0
    assert run_cli("explain", "--log", str(tmp_path / "missing.log")).returncode == 2
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert run_cli("explain", "--log", str(empty)).returncode == 2
    assert run_cli("explain", "x", "--prefill", "p.yaml").returncode == 2
    assert run_cli("explain", "x", "--format", "xml").returncode == 2


def test_partial_message_is_recognized_as_partial():
    result = explain_text("...decode registered fewer KV regions (61) than pre")
    assert result.recognized and result.hits[0].match == "partial"
    assert result.hits[0].entry_id == "region-count"


def test_nixl_error_class_names_are_recognized():
    result = explain_text("nixl_cu12._bindings.nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT")
    assert [h.entry_id for h in result.hits] == ["nixl-err-remote-disconnect"]
    # A transport warning carrying a NIXL code explains both.
    ids = [h.entry_id for h in explain_text("NIXL transport error for room 7: NIXL_ERR_REMOTE_DISCONNECT").hits]
    assert set(ids) == {"nixl-transport-error", "nixl-err-remote-disconnect"}


def test_with_configs_points_to_the_actual_cause(tmp_path):
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 32})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 64})
    msg = "RuntimeError: Page size mismatch: prefill server has page_size=32, but decode server has page_size=64. Both servers must use the same --page-size value."
    proc = run_cli("explain", msg, "--prefill", str(p), "--decode", str(d), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    cause = data["hits"][0]["cause"]
    assert cause["finding"] == "page-size-mismatch" and cause["how"] == "runtime_error"
    assert data["preflight"]["verdict"] == "fail"
    proc = run_cli("explain", msg, "--prefill", str(p), "--decode", str(d))
    assert "your configs: finding page-size-mismatch" in proc.stdout


def test_with_configs_that_do_not_predict_the_message(tmp_path):
    args = {"disaggregation-transfer-backend": "nixl", "page-size": 16}
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {"disaggregation-mode": "prefill", **args})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", **args})
    proc = run_cli("explain", "ValueError: NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry",
                   "--prefill", str(p), "--decode", str(d), "--format", "json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["hits"][0]["cause"] is None
    assert data["preflight"]["verdict"] in ("pass", "warn")


def test_list_prints_every_entry():
    proc = run_cli("explain", "--list")
    assert proc.returncode == 0
    for e in CATALOG.entries:
        assert e.id in proc.stdout
