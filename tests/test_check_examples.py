"""Every check has one example input a test sees it fire on (issue 15; as ruff documents
each rule with an example).

The examples are kvcheck's own data (``kvcheck/checks/examples/``, one file per check,
``kvcheck checks ID`` shows it). Each is run here in process, as its ``run`` line says,
from that directory, and must make kvcheck emit its id at its severity, with the exit
status that severity gives. An id that fires only against live peers (NIXL agents, the
probe, a fabric of nodes) names the real test that makes it fire (``proved-by``); that test
must exist and assert the id.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvcheck.checks.examples import EXAMPLES_DIR, load_examples
from kvcheck.checks.ids import all_checks, all_finding_ids, check_of, find_check
from tests.helpers import report_findings

TESTS = Path(__file__).resolve().parent
EXAMPLES = load_examples()
RUNNABLE = sorted(i for i, ex in EXAMPLES.items() if not ex.live)

# Checks that can never fire today, so no example can show them (kvcheck checks still
# documents them); each with the reason.
DEAD = {
    "deployment-problem": "the pipeline reports a reader's Problem under its own id (p.id or 'deployment-problem'), "
    "and every Problem a reader builds names one; nothing else emits this id",
    "kv-dtype-gpu": "the pipeline decides a side whose GPU is not given on Hopper and on Blackwell "
    "(kvcheck.cluster.decide._assumed_gpus), so no command line hands run_preflight an assumed GPU any more; the "
    "check stays for direct run_preflight callers (tests/test_resolved_kv_dtype.py)",
}
# Examples that need live peers and that no test makes fire yet (proved-by: none): the
# fabric ids whose faults the loopback and network-namespace labs do not build.
UNPROVED = {
    "fabric-registration-failed",
    "fabric-probe-failed",
    "fabric-data-mismatch",
    "fabric-nic-mismatch",
    "fabric-nic-asymmetry",
    "fabric-pair-not-probed",
}
# What a finding's severity makes the exit status (0 pass/warn, 1 fail, 4 unchecked): an
# error fails the run; an unchecked finding leaves it unchecked unless an error fails it.
EXIT_FOR = {"error": {1}, "unchecked": {1, 4}, "warning": {0, 1, 4}, "info": {0, 1, 4}}


def _findings(report, out: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every (id, severity) of a pair or -f report (top-level, per pair, per deployment)."""
    out.update((f["id"], f["severity"]) for f in report_findings(report))
    return out


@pytest.mark.parametrize("eid", RUNNABLE)
def test_example_fires_its_id(eid, monkeypatch):
    from typer.testing import CliRunner

    from kvcheck.cli import app

    ex = EXAMPLES[eid]
    monkeypatch.chdir(EXAMPLES_DIR)
    res = CliRunner().invoke(app, [*ex.command, "--format", "json"])
    assert res.exit_code in (0, 1, 4), (eid, res.output[-2000:], res.exception)
    found = _findings(json.loads(res.stdout), set())
    assert (ex.fires, ex.severity) in found, (eid, sorted(found))
    assert set(ex.also) <= found, (eid, sorted(set(ex.also) - found))
    assert res.exit_code in EXIT_FOR[ex.severity], (eid, res.exit_code, sorted(found))


def _test_source(ref: str) -> str | None:
    """The source of ``tests/FILE.py::TEST`` (a module-level function), None if absent."""
    file, _, name = ref.partition("::")
    path = TESTS.parent / file
    if not (file.startswith("tests/") and path.is_file()):
        return None
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(text, node)
    return None


@pytest.mark.parametrize("eid", sorted(i for i, ex in EXAMPLES.items() if ex.live))
def test_live_example_names_the_test_that_proves_it(eid):
    ex = EXAMPLES[eid]
    if ex.proved_by == "none":
        assert eid in UNPROVED, f"{eid}: no test proves it; name one (proved-by) or list it in UNPROVED"
        return
    assert eid not in UNPROVED, f"{eid} is proved by {ex.proved_by}: take it out of UNPROVED"
    src = _test_source(ex.proved_by)
    assert src is not None, f"{eid}: proved-by {ex.proved_by} is not a test function"
    assert f'"{ex.fires}"' in src, f"{eid}: {ex.proved_by} does not assert {ex.fires}"


def test_every_check_has_an_example():
    checks = {c["id"]: c for c in all_checks()}
    assert len(checks) > 70  # the registry is read (the test would pass vacuously otherwise)
    covered = set(EXAMPLES)  # each named by its check or finding id (test_each_example_is_named_by_the_id_it_shows)
    missing = sorted(set(checks) - covered - set(DEAD))
    assert not missing, f"checks without an example in kvcheck/checks/examples/: {missing}"
    for cid in DEAD:
        assert cid in checks and cid not in covered, cid  # still registered, still without an example


def test_each_example_is_named_by_the_id_it_shows():
    """``<id>.*`` is a check's example (it fires ``id`` or one of the finding ids of check
    ``id``) or a finding id's own (it fires ``id``), at a severity kvcheck reports."""
    checks = {c["id"] for c in all_checks()}
    for eid, ex in EXAMPLES.items():
        if eid in checks:
            assert ex.fires == eid or check_of(ex.fires) == eid, (eid, ex.fires)
        else:
            assert eid in all_finding_ids() and ex.fires == eid, f"{ex.path.name}: {eid} is no check or finding id"
        assert ex.severity in EXIT_FOR, (eid, ex.severity)
        for fid, sev in ex.also:
            assert find_check(fid) is not None and sev in EXIT_FOR, (eid, fid, sev)
        assert ex.command[:1] in (("preflight",), ("fabric",)), (eid, ex.command)


def test_cited_runtime_cases_exist():
    """An example taken from a case a runtime test verifies against SGLang's own code says
    so (``tests/FILE.py's case NAME``); the case is still there."""
    cited = 0
    for eid, ex in EXAMPLES.items():
        for file, case in re.findall(r"(tests/\w+\.py)'s case ([\w.-]+?)\.?(?:\s|$)", ex.note):
            assert f'"{case}"' in (TESTS.parent / file).read_text(), (eid, file, case)
            cited += 1
    assert cited >= 20


def test_kvcheck_checks_shows_the_example(monkeypatch):
    from typer.testing import CliRunner

    from kvcheck.cli import app

    res = CliRunner().invoke(app, ["checks", "page-size-mismatch"])
    assert res.exit_code == 0, res.output
    out = res.output
    # ruff's order: what, why, the example, the fix
    assert out.index("  what:") < out.index("  why:") < out.index("  example:") < out.index("  fix:")
    assert "$ kvcheck preflight -f bootstrap.sh --sglang-version 0.5.23 --gpu h100" in out
    assert "fires: page-size-mismatch [error]" in out and "--page-size 32" in out
    listing = CliRunner().invoke(app, ["checks"]).output
    assert "  example:" not in listing  # the list stays one block per check
