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


def _log_around(messages: dict[int, str], total: int) -> str:
    """A log of ``total`` lines with ``messages[n]`` on line n (1-based), noise elsewhere."""
    return "\n".join(f"[2026-01-02 10:11:{n:02d} TP0] {messages[n]}" if n in messages else f"[2026-01-02 10:11:{n:02d} TP0] INFO Decode batch. #running-req: 3"
                     for n in range(1, total + 1)) + "\n"


def test_log_reports_the_real_lines_of_each_message(tmp_path):
    warning = CATALOG.get("bootstrap-timeout-warning").example_text()
    messages = {
        6: "WARNING " + warning.rstrip(),  # loggers and editors drop the template's closing space
        9: "WARNING " + CATALOG.get("waiting-timeout-warning").example_text().rstrip(),
        3: "ERROR " + CATALOG.get("region-count").example_text(),
        12: "ERROR " + CATALOG.get("region-count").example_text(),
        10: "AssertionError: " + CATALOG.get("hisparse-model").example_text().rstrip(),
        14: "WARNING " + warning,  # with the closing space
    }
    log = tmp_path / "server.log"
    log.write_text(_log_around(messages, 15))
    want = {"bootstrap-timeout-warning": (2, 6, 14), "waiting-timeout-warning": (1, 9, 9), "region-count": (2, 3, 12), "hisparse-model": (1, 10, 10)}
    by_id = {h.entry_id: h for h in explain_text(log.read_text(), source="log").hits}
    for eid, (count, first, last) in want.items():
        assert (by_id[eid].count, by_id[eid].first_line, by_id[eid].last_line) == (count, first, last), eid
    proc = run_cli("explain", "--log", str(log), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    hits = {h["entry_id"]: h for h in json.loads(proc.stdout)["hits"]}
    for eid, (count, first, last) in want.items():
        assert (hits[eid]["count"], hits[eid]["first_line"], hits[eid]["last_line"]) == (count, first, last), eid
    # The tester's case: one warning on line 6 of 7 lines.
    short = tmp_path / "short.log"
    short.write_text(_log_around({6: "WARNING " + warning.rstrip()}, 7))
    proc = run_cli("explain", "--log", str(short), "--format", "json")
    hit = json.loads(proc.stdout)["hits"][0]
    assert (hit["entry_id"], hit["count"], hit["first_line"], hit["last_line"]) == ("bootstrap-timeout-warning", 1, 6, 6)
    assert "x1, first/last line 6" in run_cli("explain", "--log", str(short)).stdout


def test_every_entry_is_reported_on_its_own_line():
    lines = {}
    for i, e in enumerate(CATALOG.entries):
        lines[2 * i + 2] = "WARNING " + e.example_text().rstrip()
    result = explain_text(_log_around(lines, 2 * len(CATALOG.entries) + 1), source="log")
    by_id = {h.entry_id: h for h in result.hits}
    for i, e in enumerate(CATALOG.entries):
        hit = by_id[e.id]
        if hit.count == 1:
            assert hit.first_line == hit.last_line == 2 * i + 2, e.id
        else:  # a NIXL code also found inside another entry's message
            assert hit.first_line <= 2 * i + 2 <= hit.last_line, e.id


def test_a_message_wrapped_over_lines_reports_the_lines_it_spans():
    text = "noise\nnoise\nValueError: NIXL PD transfer: decode registered fewer KV regions (61)\n    than prefill (62); unexpected geometry\nnoise\nnoise\n"
    hit = explain_text(text, source="log").hits[0]
    assert (hit.entry_id, hit.count, hit.first_line, hit.last_line) == ("region-count", 1, 3, 4)


# ---- check ids: every one exists, and each runtime_error a check emits points to it

_PKG = Path(__file__).resolve().parent.parent / "kvcheck"


def _emitted_ids() -> set[str]:
    """Ids the checks emit: @check ids and literal Finding(id=...) ids in kvcheck/checks."""
    import ast

    ids = set()
    for path in (_PKG / "checks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None)
            if name == "check" and node.args and isinstance(node.args[0], ast.Constant):
                ids.add(node.args[0].value)
            if name == "Finding":
                ids.update(kw.value.value for kw in node.keywords if kw.arg == "id" and isinstance(kw.value, ast.Constant))
    return ids


def _emitted_runtime_errors() -> list[tuple[str, str]]:
    """(finding id, message with {} for the variable parts) for each runtime_error a check
    emits with a literal message: start-up refusals (Refusal(id, hook, type, message) in
    kvcheck/sglang/startup/) and RuntimeErrorPrediction(message=...) in a @check function."""
    import ast
    import importlib

    from kvcheck.explain.source import _render

    out = []
    startup = [ast.parse(p.read_text()) for p in sorted((_PKG / "sglang" / "startup").glob("*.py"))]
    for node in (n for tree in startup for n in ast.walk(tree)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Refusal" and len(node.args) == 4 and isinstance(node.args[0], ast.Constant):
            msg = _render(node.args[3])
            if msg:
                out.append((node.args[0].value, msg))
    for path in sorted((_PKG / "checks").glob("*.py")):
        mod = importlib.import_module(f"kvcheck.checks.{path.stem}")
        for fn in ast.parse(path.read_text()).body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            ids = [d.args[0].value for d in fn.decorator_list if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "check"]
            for node in ast.walk(fn):
                if ids and isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RuntimeErrorPrediction":
                    for kw in node.keywords:
                        if kw.arg != "message":
                            continue
                        msg = _render(kw.value)
                        if msg is None and isinstance(kw.value, ast.Name):
                            msg = getattr(mod, kw.value.id, None)
                        if msg:
                            out.append((ids[0], msg))
    return out


def test_every_check_id_in_the_catalog_exists():
    known = set(REGISTRY) | set(all_finding_ids()) | _emitted_ids()
    missing = {e.id: e.check for e in CATALOG.entries if e.check is not None and e.check not in known}
    assert not missing


def test_entries_of_an_emitted_runtime_error_point_to_its_check():
    from kvcheck.checks import transfer
    from kvcheck.explain.source import normalize

    emitted = _emitted_runtime_errors()
    assert len(emitted) >= 20
    wrong = {}
    for fid, msg in emitted:
        for e in CATALOG.entries:
            if normalize(e.template).rstrip() == normalize(msg).rstrip() and e.check != fid:
                wrong[e.id] = (e.check, fid)
    # bootstrap and transfer-decision errors: classified by the start of the runtime's text
    for e in CATALOG.entries:
        if e.when == "start-up":
            continue
        fid, _ = transfer._classify(e.example_text(), transfer._BOOTSTRAP_IDS + transfer._DECISION_IDS)
        if fid != "runtime-error" and e.check != fid:
            wrong[e.id] = (e.check, fid)
    assert not wrong
    expected = {
        "hisparse-device-only-mooncake": "hisparse-draft-nixl",
        "decode-host-receive-hisparse": "decode-host-receive-hisparse",
        "hisparse-model": "hisparse-model",
        "hisparse-radix-cache": "hisparse-radix-cache",
        "hisparse-mixed-chunk": "hisparse-mixed-chunk",
        "hisparse-topk": "hisparse-spec-topk",
        "hisparse-adaptive-spec": "hisparse-spec-adaptive",
        "prefill-fake-backend": "prefill-fake-backend",
        "guard-foreign-traffic": "transfer-backend",
    }
    assert {eid: CATALOG.get(eid).check for eid in expected} == expected


def test_predicted_by_names_the_checks_command():
    proc = run_cli("explain", "NotImplementedError: HiSparse device-only PD transfer currently requires the Mooncake backend")
    assert proc.returncode == 0
    assert "predicted by: kvcheck checks hisparse-draft-nixl" in proc.stdout
    assert "kvcheck check " not in proc.stdout
    proc = run_cli("explain", "AssertionError: Hierarchical sparse attention currently requires --disable-radix-cache.")
    assert "predicted by: kvcheck checks hisparse-radix-cache (finding hisparse-radix-cache of check startup)" in proc.stdout
    for cid in ("hisparse-draft-nixl", "hisparse-radix-cache"):
        docs = run_cli("checks", cid)
        assert docs.returncode == 0 and docs.stdout, docs.stderr


def test_list_json_shows_templates_checks_and_reachability():
    proc = run_cli("explain", "--list", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["runtime"] == CATALOG.runtime and data["count"] == len(CATALOG.entries)
    by_id = {e["id"]: e for e in data["entries"]}
    assert list(by_id) == [e.id for e in CATALOG.entries]
    for e in CATALOG.entries:
        assert by_id[e.id]["template"] == e.template and by_id[e.id]["check"] == e.check and by_id[e.id]["reachable"] == e.reachable
    table = run_cli("explain", "--list").stdout
    assert CATALOG.get("region-count").template in table
    assert run_cli("explain", "--list", "--format", "xml").returncode == 2


def test_an_entry_id_explains_that_entry():
    proc = run_cli("explain", "hisparse-device-only-mooncake")
    assert proc.returncode == 0, proc.stdout
    assert "hisparse-device-only-mooncake" in proc.stdout and "kvcheck checks hisparse-draft-nixl" in proc.stdout
    data = json.loads(run_cli("explain", "region-count", "--format", "json").stdout)
    assert data["recognized"] is True
    assert [(h["entry_id"], h["match"]) for h in data["hits"]] == [("region-count", "id")]
    # in a log, an id is only text
    assert not explain_text("region-count", source="log").recognized
