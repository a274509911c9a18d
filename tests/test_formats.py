"""The CI formats: JUnit XML (one test case per check, failures for error findings),
GitHub workflow annotations, and exit statuses equal to the JSON format's."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from kvcheck.checks import REGISTRY
from kvcheck.checks.ids import check_of as _check_of
from kvcheck.report.github import command, escape_data, escape_property
from tests.helpers import preflight_json, run_cli, write_config

CASES = sorted(Path(__file__).resolve().parent.parent.parent.joinpath("shared", "cases").glob("*.yaml"))
ANNOTATION = re.compile(r"^::(error|warning|notice)(?: ([A-Za-z]+=[^,:]*(?:,[A-Za-z]+=[^,:]*)*))?::(.*)$")


def _pair(tmp_path: Path, case: Path) -> tuple[Path, Path]:
    data = yaml.safe_load(case.read_text())
    p = write_config(tmp_path, "prefill", data["prefill"].get("model", data["model"]), data["prefill"]["args"])
    d = write_config(tmp_path, "decode", data["decode"].get("model", data["model"]), data["decode"]["args"])
    return p, d


def _run(p: Path, d: Path, fmt: str, *extra: str):
    return run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", fmt, "--kernel", "builtin", *extra)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.stem)
def test_junit_and_github_agree_with_json(tmp_path, case):
    import json

    p, d = _pair(tmp_path, case)
    js = _run(p, d, "json")
    report = json.loads(js.stdout)
    junit = _run(p, d, "junit")
    github = _run(p, d, "github")
    assert junit.returncode == github.returncode == js.returncode

    root = ET.fromstring(junit.stdout)
    suites = root.findall("testsuite") if root.tag == "testsuites" else [root]
    assert len(suites) == 1
    cases = suites[0].findall("testcase")
    names = [c.get("name") for c in cases]
    assert len(names) == len(set(names))
    assert set(REGISTRY) <= set(names)
    errors = [f for f in report["findings"] if f["severity"] == "error" and not f["ignored"]]
    failed = {c.get("name"): [f.get("type") for f in c.findall("failure")] for c in cases if c.findall("failure")}
    assert sorted(t for types in failed.values() for t in types) == sorted(f["id"] for f in errors)
    for f in errors:
        assert f["id"] in failed[_check_of(f["id"])]
    assert int(suites[0].get("failures")) == len(errors)
    props = {pr.get("name"): pr.get("value") for pr in suites[0].iter("property")}
    assert props["verdict"] == report["verdict"] and props["exit_code"] == str(js.returncode)

    lines = github.stdout.strip().splitlines()
    for line in lines:
        assert ANNOTATION.match(line), line
        assert "\n" not in line
    errs = [ln for ln in lines[:-1] if ln.startswith("::error ")]
    assert len(errs) == len(errors)
    for f in errors:
        assert any(f"title=kvcheck {f['id']}::" in ln for ln in errs)
        if f["runtime_error"]:
            assert any(escape_data(f["runtime_error"]["message"]) in ln for ln in errs)
    assert lines[-1].startswith("::error title=kvcheck verdict::" if report["verdict"] == "fail" else "::notice title=kvcheck verdict::")
    assert report["verdict"].upper() in lines[-1]


def test_ignored_error_is_skipped_in_junit_and_a_notice_in_github(tmp_path):
    model = "llama-3.1-8b"
    p = write_config(tmp_path, "prefill", model, {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 32})
    d = write_config(tmp_path, "decode", model, {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 64})
    rc_json, report = preflight_json(tmp_path, model, {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 32},
                                     {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 64}, "--ignore", "page-size-mismatch")
    junit = _run(p, d, "junit", "--ignore", "page-size-mismatch")
    assert junit.returncode == rc_json
    case = [c for c in ET.fromstring(junit.stdout).iter("testcase") if c.get("name") == "bootstrap"][0]
    assert case.find("failure") is None and case.find("skipped") is not None
    github = _run(p, d, "github", "--ignore", "page-size-mismatch")
    assert github.returncode == rc_json
    assert any(ln.startswith("::notice title=kvcheck page-size-mismatch (ignored)::") for ln in github.stdout.splitlines())


def test_bad_input_exit_2_in_every_format(tmp_path):
    for fmt in ("json", "junit", "github"):
        proc = run_cli("preflight", "--prefill", str(tmp_path / "nope.yaml"), "--decode", str(tmp_path / "nope.yaml"), "--format", fmt)
        assert proc.returncode == 2
    proc = run_cli("preflight", "--prefill", "a", "--decode", "b", "--format", "xml")
    assert proc.returncode == 2


def test_workflow_command_escaping():
    assert escape_data("50%\r\nx") == "50%25%0D%0Ax"
    assert escape_property("a:b,c") == "a%3Ab%2Cc"
    assert command("warning", "two\nlines", title="kvcheck x: y") == "::warning title=kvcheck x%3A y::two%0Alines"
    assert command("notice", "m") == "::notice::m"


def test_ci_workflow_is_valid_yaml_and_gates_on_github_format():
    wf = Path(__file__).resolve().parent.parent / "configs" / "ci" / "kvcheck-preflight.yml"
    text = wf.read_text()
    data = yaml.safe_load(text)
    steps = data["jobs"]["preflight"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "--format github" in runs and "--format junit" in runs
    assert data["jobs"]["deploy"]["needs"] == "preflight"
    for status in ("0  pass", "1  fail", "2  bad input", "3  a live source"):
        assert status in text


def _skipped(root) -> dict[str, str]:
    return {c.get("name"): c.find("skipped").get("message") for c in root.iter("testcase") if c.find("skipped") is not None}


def test_checks_that_did_not_run_are_skipped_in_junit(tmp_path):
    args = {"disaggregation-transfer-backend": "nixl", "page-size": 16}
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {"disaggregation-mode": "prefill", **args})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {"disaggregation-mode": "decode", **args})
    junit = _run(p, d, "junit")
    root = ET.fromstring(junit.stdout)
    skipped = _skipped(root)
    for cid in ("live-route", "live-role", "live-version", "live-model"):
        assert "no live side" in skipped[cid], cid
    assert "--decode-agent" in skipped["agents"] and "--probe" in skipped["probe"]
    # the static checks ran: not skipped
    for cid in ("transfer-backend", "bootstrap", "transfer-decision", "startup"):
        assert cid not in skipped
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    assert int(suite.get("skipped")) == len(skipped)


def test_not_run_follows_live_sides_agents_and_probe(tmp_path):
    import json

    from kvcheck.checks.base import Finding, Severity
    from kvcheck.report.junit import build_suite, not_run
    from kvcheck.report.model import Report, SideSummary

    def report(origins, **extra):
        sides = [SideSummary(role=r, origin=o, model="LlamaForCausalLM", pool="mha") for r, o in zip(("prefill", "decode"), origins)]
        return Report(verdict="pass", plan=None, findings=[], sides=sides, extra=extra)

    live = {"live-route", "live-role", "live-version", "live-model"}
    assert live | {"agents", "probe"} <= set(not_run(report(["p.yaml", "d.yaml"])))
    assert not live & set(not_run(report(["http://10.0.0.1:30000", "d.yaml"])))
    snap = tmp_path / "prefill-snap.json"
    snap.write_text(json.dumps({"server_info": {"version": "0.5.23"}, "url": "http://x:30000"}))
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"page_size": 16}))
    assert not live & set(not_run(report([str(snap), str(args)])))
    assert live <= set(not_run(report([str(args), str(args)])))
    ran = not_run(report(["p.yaml", "d.yaml"], agents=[{"name": "a"}], probe={"segments": []}))
    assert "agents" not in ran and "probe" not in ran
    # a check with a finding ran, whatever the sides
    r = report(["p.yaml", "d.yaml"])
    r.findings.append(Finding(id="agent-geometry", severity=Severity.ERROR, message="m", fix="f"))
    assert "agents" not in not_run(r)
    # a probe asked for but not run is skipped with its reason
    r = report(["p.yaml", "d.yaml"])
    r.findings.append(Finding(id="probe-skipped", severity=Severity.WARNING, message="probe not run: no plan", fix="f"))
    case = [c for c in build_suite(r).test_cases if c.name == "probe"][0]
    assert case.is_skipped() and "probe not run: no plan" in str(case.skipped)
