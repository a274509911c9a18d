"""One check registry (issue 15): ``kvcheck checks`` lists pair, cluster and pipeline
checks; every finding id kvcheck can print resolves to a documented check."""

from __future__ import annotations

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
