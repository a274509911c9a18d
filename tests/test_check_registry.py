"""One check registry (issue 15): ``kvcheck checks`` lists pair, cluster and pipeline
checks; every finding id kvcheck can print resolves to a documented check."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import run_cli

from kvcheck.checks.ids import all_checks, all_finding_ids, find_check
from kvcheck.cluster.checks import CLUSTER_CHECKS


def test_every_check_has_what_why_and_fix():
    checks = all_checks()
    assert {c["scope"] for c in checks} >= {"pair", "cluster", "pipeline"}
    for c in checks:
        assert c["what"] and c["why"] and c["fix"], c["id"]
    ids = [c["id"] for c in checks]
    assert len(ids) == len(set(ids))


def test_no_start_up_refusal_or_other_finding_id_is_another_checks_id():
    # `kv-dtype-gpu` was both the check "the KV dtype comparison does not rest on an
    # assumed GPU" (unchecked) and the start-up refusal of a KV dtype a GPU cannot use
    # (error): one --ignore hid both, and `kvcheck checks` documented one. A refusal id
    # (and any id a check emits beside its own) names exactly one thing.
    from kvcheck.checks import REGISTRY
    from kvcheck.checks.ids import FINDING_IDS, PIPELINE_DOCS
    from kvcheck.sglang.startup import CONNECTOR_REFUSAL_IDS, REFUSAL_IDS

    checks = [c["id"] for c in all_checks()]
    assert "kv-dtype-gpu" in checks and "kv-dtype-gpu-refused" in REFUSAL_IDS
    own = set(REGISTRY) | set(CLUSTER_CHECKS) | set(PIPELINE_DOCS)
    assert not set(REFUSAL_IDS) & own, sorted(set(REFUSAL_IDS) & own)
    assert not set(CONNECTOR_REFUSAL_IDS) & (own - {"connector-startup"}), sorted(set(CONNECTOR_REFUSAL_IDS) & own)
    owners: dict[str, str] = {}
    for check, ids in FINDING_IDS.items():
        for fid in ids:
            if check == "pipeline":  # the pipeline's own ids, each documented as itself
                assert fid in PIPELINE_DOCS and fid not in set(REGISTRY) | set(CLUSTER_CHECKS), fid
            else:
                assert fid == check or fid not in own, f"{check} emits {fid}, which is another check's id"
            assert owners.setdefault(fid, check) == check, f"{fid}: emitted by {owners[fid]} and {check}"


def test_every_finding_id_resolves_to_its_check():
    for fid in list(all_finding_ids()) + list(CLUSTER_CHECKS):
        assert find_check(fid) is not None, fid


def test_kvcheck_checks_names_a_cluster_check():
    proc = run_cli("checks", "missing-role")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("missing-role [error]") and "(cluster)" in proc.stdout
    listing = run_cli("checks").stdout
    for cid in CLUSTER_CHECKS:
        assert f"\n{cid} [" in "\n" + listing


# -- every id kvcheck can print is documented (issue 15: docs kept from drifting) ---------

KVCHECK = Path(__file__).resolve().parents[1] / "kvcheck"
# Calls whose first string argument (or ``id=``/``finding_id=``) is a finding id kvcheck
# prints: pair/live findings, the probes' findings, the readers' problems (reported under
# their own id), start-up refusals and agent registration issues.
_EMITTERS = {"Finding", "_finding", "Problem", "Refusal", "ConnectorRefusal", "RegistrationIssue"}


def _emitted_ids() -> dict[str, str]:
    """Every finding id written as a literal at an emission site in ``kvcheck/`` (``explain``
    excluded: its ids name log messages, not findings) -> one place that emits it."""
    out: dict[str, str] = {}
    for path in sorted(KVCHECK.rglob("*.py")):
        if "explain" in path.relative_to(KVCHECK).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            ids = []
            first = node.args[0] if node.args else None
            if name in _EMITTERS or (name == "fail" and path.name.startswith("probe")):
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    ids.append(first.value)
            if name in _EMITTERS or name in ("emit", "_emit"):
                ids += [
                    k.value.value
                    for k in node.keywords
                    if k.arg in ("id", "finding_id") and isinstance(k.value, ast.Constant)
                ]
            for fid in ids:
                out.setdefault(fid, f"{path.relative_to(KVCHECK.parent)}:{node.lineno}")
    return out


def test_every_emitted_finding_id_is_a_documented_check():
    emitted = _emitted_ids()
    assert len(emitted) > 60  # the scan finds the emission sites (it would pass vacuously otherwise)
    assert {"config-not-read", "probe-timeout", "agent-alloc-failed", "known-issue"} <= set(emitted)
    missing = {fid: where for fid, where in emitted.items() if find_check(fid) is None}
    assert not missing, f"finding ids printed but not registered in kvcheck/checks/ids.py: {missing}"


def test_reader_problems_are_documented_with_the_severity_they_are_reported_at():
    from kvcheck.checks.base import Severity
    from kvcheck.checks.ids import PIPELINE_DOCS
    from kvcheck.cluster.pipeline import PROBLEM_SEVERITY

    problems = {fid for fid, where in _emitted_ids().items() if "sources/deployments/" in where} - {"startup-argparse"}
    assert {"config-not-read", "unresolved-address", "source-not-read", "not-disaggregated"} <= problems
    for fid in problems:
        assert fid in PIPELINE_DOCS, fid
        assert PIPELINE_DOCS[fid][0] == PROBLEM_SEVERITY.get(fid, Severity.UNCHECKED).value, fid


# Backticked lowercase-hyphen words in the docs that are not check or finding ids.
NOT_CHECK_IDS = {"model-path", "speculative-draft-model-path", "prefill-1", "mooncake-transfer-engine"}
DOCS = ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")


def test_check_ids_the_docs_name_are_registered():
    """A backticked ``word-word`` in README/ARCHITECTURE/CONTRIBUTING is a check or finding
    id (``kvcheck checks`` documents it) unless listed in ``NOT_CHECK_IDS``."""
    root = KVCHECK.parent
    named: dict[str, str] = {}
    for doc in DOCS:
        for tok in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", (root / doc).read_text()):
            named.setdefault(tok, doc)
    assert len(named) > 40
    unknown = {tok: doc for tok, doc in named.items() if tok not in NOT_CHECK_IDS and find_check(tok) is None}
    assert not unknown, f"the docs name ids no check documents: {unknown}"


def test_kvcheck_checks_answers_every_id():
    """``kvcheck checks ID`` exits 0 for every check id, registered finding id, emitted id
    and id the docs name, and prints the owning check (in process: one CLI run per id)."""
    from typer.testing import CliRunner

    from kvcheck.cli import app

    ids = {c["id"] for c in all_checks()} | set(all_finding_ids()) | set(CLUSTER_CHECKS) | set(_emitted_ids())
    runner = CliRunner()
    for fid in sorted(ids):
        res = runner.invoke(app, ["checks", fid])
        assert res.exit_code == 0, (fid, res.output, res.exception)
        owner = find_check(fid)["id"]
        first, _, rest = res.output.partition("\n")
        # the id asked for heads the answer: the check itself, or a finding id said as one
        # of its owning check's, whose block follows
        assert first.startswith((f"{fid} [", f"{fid}: ")), (fid, first)
        if owner != fid:
            assert f"a finding id of check {owner}" in first and rest.startswith(f"{owner} ["), (fid, res.output)


def test_kvcheck_checks_shows_each_id_at_the_severity_its_examples_emit_it():
    """``kvcheck checks ID`` names ID at the severity kvcheck emits it with: for every
    example, the id it fires and each id of its ``also`` line (``backend-mismatch`` was
    shown as ``backend-unchecked [unchecked]`` while its example fired it as an error). A
    check that emits its own id at another severity too says when in its ``what``."""
    from typer.testing import CliRunner

    from kvcheck.checks.examples import load_examples
    from kvcheck.cli import app

    runner = CliRunner()
    shown: dict[str, str] = {}
    for eid, ex in sorted(load_examples().items()):
        for fid, sev in [(ex.fires, ex.severity), *ex.also]:
            if fid not in shown:
                shown[fid] = runner.invoke(app, ["checks", fid]).output.partition("\n")[0]
            if shown[fid].startswith(f"{fid} [{sev}]"):
                continue
            chk = find_check(fid)
            assert chk is not None and chk["id"] == fid and shown[fid].startswith(f"{fid} ["), (eid, fid, shown[fid])
            assert re.search(rf"\b{sev}\b", chk["what"]), (eid, fid, sev, "the check's what does not say when")
    assert len(shown) > 100
