"""What a user hands kvcheck is read as what it is, or refused naming it (a new-user tester's
findings, branch ``inputs``). Every file here is written by the test.

1. A file given with ``-f`` is never dropped silently: an SGLang ``--config`` YAML beside a
   launch script is that server's file (read inside the launch line that names it), a
   server of its own (it says its role), or exit 2 naming it.
2. ``-f`` reads an SGLang ``--config`` YAML as a server's args, merged as SGLang 0.5.23
   merges them (``prepare_server_args`` -> ``ConfigArgumentMerger``: the file's args first,
   so the command line wins; ``yaml.safe_load``, so a key written twice keeps the later).
3. A pair side (``--prefill/--decode FILE``) goes through the ``-f`` readers: a script's own
   variables and exports, a multi-line launch, a ``--config`` YAML give the answer ``-f``
   gives; an empty side file is exit 2.
4. A key written twice: a Kubernetes manifest is refused (exit 2: kubectl refuses it); an
   SGLang ``--config`` file keeps the later value (a ``duplicate-key`` warning).
5. A hostile deployment file: no message prints what a file holds (a YAML error's line, a
   shadow file named as ``--config``, a ``$(cat ...)`` / backtick command), nor runs it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml
from helpers import report_findings, run_cli
from hostile_inputs import CANARY

from kvcheck.cluster.pipeline import ClusterOptions, check_deployments
from kvcheck.errors import InputError
from kvcheck.sources.deployments import read_deployments

MODEL = "meta-llama/Llama-3.1-8B"  # in kvcheck's catalog: no download, no network
LAUNCH = f"python -m sglang.launch_server --model-path {MODEL}"
OPTS = ClusterOptions(sglang_version="0.5.23", gpu="h100")


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text)
    return p


def _run(*paths: Path):
    return check_deployments(read_deployments(list(paths)), OPTS)


def _ids(report) -> list[str]:
    return [x.finding.id for _, x in report.all_findings()]


def _args(report) -> dict[str, dict]:
    """Instance name -> the args kvcheck decided on (SGLang dest names)."""
    return {ir.instance.name: ir.args for dep in report.deployments for ir in dep.instances}


def _sglang_args(argv: list[str]) -> argparse.Namespace:
    """The namespace SGLang 0.5.23's own ``prepare_server_args`` parses ``argv`` into
    (its parser, ``ConfigArgumentMerger`` for ``--config``), before ``ServerArgs``
    resolves anything."""
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    if "--config" in argv:
        argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
    return parser.parse_args(argv)


# -- 1 and 2: a --config YAML given with -f ----------------------------------------------


@pytest.mark.runtime
def test_a_launch_lines_config_given_with_f_too_is_read_once_as_sglang_merges_it(tmp_path):
    # page-size written twice (PyYAML keeps the later), port on both (the line wins)
    _write(tmp_path, "cfg.yaml", "page-size: 64\nport: 1234\npage-size: 16\n")
    script = _write(
        tmp_path,
        "launch.sh",
        f"{LAUNCH} --disaggregation-mode prefill --port 30000 --config cfg.yaml\n"
        f"{LAUNCH} --disaggregation-mode decode --port 30001 --page-size 16\n",
    )
    alone = _run(script)
    both = _run(script, tmp_path / "cfg.yaml")
    assert len(both.deployments) == 1 and len(both.deployments[0].instances) == 2  # not a third server
    assert "not-disaggregated" not in _ids(both)
    assert sorted(_ids(both)) == sorted(_ids(alone)) and both.exit_code == alone.exit_code == 0
    real = _sglang_args(["--model-path", MODEL, "--disaggregation-mode", "prefill", "--port", "30000", "--config", str(tmp_path / "cfg.yaml")])
    assert (real.page_size, real.port) == (16, 30000)
    [prefill] = [a for n, a in _args(both).items() if n.startswith("prefill")]
    assert (prefill["page_size"], prefill["port"]) == (real.page_size, real.port)
    [dup] = [x.finding for _, x in both.all_findings() if x.finding.id == "duplicate-key"]
    assert dup.severity.value == "warning" and "lines 1 and 3" in dup.message


def test_a_config_yaml_beside_a_script_that_names_no_role_is_exit_2_naming_it(tmp_path):
    # the tester's false pass: its mooncake backend and page size never reached the decision
    script = _write(tmp_path, "launch.sh", f"{LAUNCH} --disaggregation-mode prefill\n{LAUNCH} --disaggregation-mode decode --port 30001\n")
    extra = _write(tmp_path, "extra.yaml", "page-size: 64\ndisaggregation-transfer-backend: mooncake\n")
    with pytest.raises(InputError) as exc:
        read_deployments([script, extra])
    assert exc.value.exit_code == 2
    assert str(exc.value).startswith(f"{extra}:") and "cannot tell which server it configures" in str(exc.value)
    proc = run_cli("preflight", "-f", str(script), "-f", str(extra), "--sglang-version", "0.5.23")
    assert proc.returncode == 2 and "extra.yaml" in proc.stderr and proc.stdout == ""


def test_every_f_file_contributes_or_is_exit_2_naming_it(tmp_path):
    script = _write(tmp_path, "launch.sh", f"{LAUNCH} --disaggregation-mode prefill --tp $TP\n{LAUNCH} --disaggregation-mode decode --port 30001 --tp $TP\n")
    used = _write(tmp_path, "common.sh", "TP=1\n")
    unused = _write(tmp_path, "other.sh", "LOG_DIR=/var/log/sglang\n")
    notes = _write(tmp_path, "notes.md", "# How we deploy\n\nAsk the platform team.\n")
    r = _run(used, script)
    assert r.exit_code == 0 and {a["tp_size"] for a in _args(r).values()} == {1}  # common.sh's TP reached both
    for extra, why in ((unused, "it sets LOG_DIR, which no other -f file uses"), (notes, "found nothing in it to check")):
        with pytest.raises(InputError) as exc:
            read_deployments([used, script, extra])
        assert exc.value.exit_code == 2 and str(exc.value).startswith(f"{extra}:") and why in str(exc.value)


@pytest.mark.runtime
def test_a_config_yaml_that_says_its_role_is_a_server_with_sglangs_values(tmp_path):
    script = _write(tmp_path, "launch.sh", f"{LAUNCH} --disaggregation-mode prefill --page-size 16\n{LAUNCH} --disaggregation-mode decode --port 30001 --page-size 16\n")
    extra = _write(tmp_path, "decode2.yaml", f"model-path: {MODEL}\ndisaggregation-mode: decode\nport: 30002\npage-size: 64\n")
    r = _run(script, extra)
    real = _sglang_args(["--config", str(extra)])
    args = _args(r)["decode@decode2.yaml"]
    assert (args["page_size"], args["port"], args["disaggregation_mode"]) == (real.page_size, real.port, real.disaggregation_mode) == (64, 30002, "decode")
    assert r.exit_code == 1 and "page-size-mismatch" in _ids(r)
    # a key SGLang's merger passes on as written (--page_size) is refused by its parser:
    # that server's start-up refusal, in the parser's words, at the key's line
    _write(tmp_path, "decode2.yaml", f"model-path: {MODEL}\ndisaggregation-mode: decode\nport: 30002\npage_size: 64\n")
    with pytest.raises(SystemExit):
        _sglang_args(["--config", str(extra)])
    r = _run(script, extra)
    [refusal] = [x for _, x in r.all_findings() if x.finding.id == "startup-argparse"]
    assert "unrecognized arguments: --page_size 64" in refusal.finding.message and str(refusal.location).endswith("decode2.yaml:4")
    assert r.exit_code == 1


# -- 3: a pair side is read as -f reads it ----------------------------------------------


def _json(proc) -> dict:
    assert proc.stdout.startswith("{"), proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _findings(report: dict) -> list[tuple[str, str]]:
    """(id, message) of every finding of a ``-o json`` report, wherever it is attached."""
    return [(f["id"], f["message"]) for f in report_findings(report)]


def _finding_ids(report: dict) -> list[str]:
    return sorted({i for i, _ in _findings(report)})


def test_a_pair_side_script_and_config_yaml_get_the_answer_f_gives(tmp_path):
    prefill = _write(
        tmp_path,
        "prefill.sh",
        f"#!/bin/bash\nMODEL={MODEL}\nexport PAGE=64\nTP=1\n"
        "python -m sglang.launch_server \\\n  --model-path $MODEL --tp ${TP:-8} \\\n"
        "  --disaggregation-mode prefill --page-size $PAGE\n",
    )
    decode = _write(tmp_path, "decode.yaml", f"model-path: {MODEL}\ndisaggregation-mode: decode\nport: 30001\npage-size: 16\n")
    pair = run_cli("preflight", "--prefill", str(prefill), "--decode", str(decode), "--sglang-version", "0.5.23", "--gpu", "h100", "-o", "json")
    f = run_cli("preflight", "-f", str(prefill), "-f", str(decode), "--sglang-version", "0.5.23", "--gpu", "h100", "-o", "json")
    assert pair.returncode == f.returncode == 1, (pair.stderr[-800:], f.stderr[-800:])
    assert "page-size-mismatch" in _finding_ids(_json(pair)) and _finding_ids(_json(pair)) == _finding_ids(_json(f))
    # the values: the script's own assignments (64, not ${TP:-8}'s default), the YAML's 16
    assert "prefill --page-size=64, decode --page-size=16" in pair.stdout


@pytest.mark.runtime
def test_a_pair_side_of_bare_args_over_several_lines_is_one_servers_args(tmp_path):
    from kvcheck.cluster.pair_input import side_instance

    bare = _write(tmp_path, "decode.args", f"# decode\n--model-path {MODEL} --disaggregation-mode decode  # role\n\n  --page-size 64\n")
    inst = side_instance(str(bare), "decode", load_live=None)
    real = _sglang_args(inst.argv)
    assert (real.page_size, real.disaggregation_mode) == (64, "decode")  # no line dropped
    assert inst.arg_locations["--page-size"].line == 4


def test_an_empty_pair_side_is_exit_2_naming_it(tmp_path):
    empty = _write(tmp_path, "prefill.sh", "")
    decode = _write(tmp_path, "decode.yaml", f"model-path: {MODEL}\ndisaggregation-mode: decode\n")
    proc = run_cli("preflight", "--prefill", str(empty), "--decode", str(decode), "--sglang-version", "0.5.23")
    assert proc.returncode == 2 and "prefill.sh" in proc.stderr and "empty" in proc.stderr


# -- 4: a key written twice ---------------------------------------------------------------


def test_a_manifest_with_a_duplicate_key_is_refused_as_kubectl_refuses_it(tmp_path):
    manifest = _write(
        tmp_path,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: prefill\n  name: decode\nspec:\n  containers:\n  - name: c\n"
        f"    command: [python, -m, sglang.launch_server, --model-path, {MODEL}, --disaggregation-mode, prefill]\n",
    )
    with pytest.raises(InputError) as exc:
        read_deployments([manifest])
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and msg.startswith(f"{manifest}: line 5: key 'name' is written twice")
    assert "first at line 4" in msg and "kubectl" in msg


@pytest.mark.runtime
def test_a_config_yaml_duplicate_key_keeps_the_later_value_as_pyyaml_does(tmp_path):
    text = f"model-path: {MODEL}\ndisaggregation-mode: prefill\npage-size: 16\npage-size: 64\n"
    prefill = _write(tmp_path, "prefill.yaml", text)
    decode = _write(tmp_path, "decode.yaml", f"model-path: {MODEL}\ndisaggregation-mode: decode\npage-size: 64\nport: 30001\n")
    r = _run(prefill, decode)
    # SGLang's merger reads the file with yaml.safe_load: the later value
    assert yaml.safe_load(text)["page-size"] == _sglang_args(["--config", str(prefill)]).page_size == 64
    assert _args(r)["prefill@prefill.yaml"]["page_size"] == 64
    assert r.exit_code == 0 and "page-size-mismatch" not in _ids(r)
    [dup] = [x for _, x in r.all_findings() if x.finding.id == "duplicate-key"]
    assert dup.finding.severity.value == "warning" and str(dup.location).endswith("prefill.yaml:4")


# -- 5: a hostile deployment file -----------------------------------------------------------


def test_a_hostile_deployment_never_shows_or_runs_what_its_files_hold(tmp_path):
    secret = _write(tmp_path, "shadow.yaml", f"root:$6$salt${CANARY}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    _write(tmp_path, "passwd", f"root:x:0:0:{CANARY}:/root:/bin/bash\n")
    broken = _write(tmp_path, "broken.yaml", f"apiVersion: v1\nkind: Pod\nroot: [x, {CANARY}\n  bad: : }}\n")
    script = _write(
        tmp_path,
        "deploy.sh",
        f"{LAUNCH} --disaggregation-mode prefill --config {secret}\n"
        f'{LAUNCH} --disaggregation-mode decode --port 30001 --page-size "`cat {tmp_path}/passwd`" --tp $(cat {secret})\n',
    )
    runs = {
        "script": run_cli("preflight", "-f", str(script), "--root", "/", "--sglang-version", "0.5.23", "-o", "json"),
        "yaml": run_cli("preflight", "-f", str(broken), "--sglang-version", "0.5.23"),
        "pair": run_cli("preflight", "--prefill", str(tmp_path / "passwd"), "--decode", str(secret), "--root", "/", "--sglang-version", "0.5.23"),
    }
    for name, proc in runs.items():
        out = proc.stdout + proc.stderr
        assert CANARY not in out and "daemon" not in out and "/bin/bash" not in out, (name, out[-1500:])
        assert "Traceback" not in out, name
    # SGLang reads the shadow file as YAML whose keys (``root:$6$...::``) its parser refuses:
    # the prefill's start-up refusal, its text not shown. The commands are never run:
    # the decode's values are unknown (unchecked), never the command's text refused
    report = _json(runs["script"])
    assert runs["script"].returncode == 1
    found = _findings(report)
    argparse_msgs = [m for i, m in found if i == "startup-argparse"]
    assert argparse_msgs and all(m.startswith("prefill@deploy.sh:1") for m in argparse_msgs)
    assert any("unrecognized arguments: (not shown)" in m for m in argparse_msgs)
    subs = [m for i, m in found if i == "unresolved-variable"]
    assert any(m.startswith("`--page-size $(...)`: a command substitution") for m in subs)
    assert any(m.startswith("`--tp $(...)`: a command substitution") for m in subs)
    assert runs["yaml"].returncode == 2 and "broken.yaml: YAML syntax error at line" in runs["yaml"].stderr
    assert runs["pair"].returncode == 2 and "passwd" in runs["pair"].stderr


@pytest.mark.runtime
def test_a_config_not_named_yaml_is_sglangs_refusal_and_never_read(tmp_path):
    conf = _write(tmp_path, "passwd.conf", f"page-size: 64\nroot:x:0:0:{CANARY}: 1\n")
    script = _write(tmp_path, "launch.sh", f"{LAUNCH} --disaggregation-mode prefill --config passwd.conf\n{LAUNCH} --disaggregation-mode decode --port 30001\n")
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    with pytest.raises(ValueError, match="Config file must be YAML format"):
        ConfigArgumentMerger(argparse.ArgumentParser()).merge_config_with_args(["--config", str(conf)])
    r = _run(script)
    [refused] = [x for _, x in r.all_findings() if x.finding.id == "config-refused"]
    assert "does not end in .yaml or .yml" in refused.finding.message and CANARY not in refused.finding.message
    assert str(refused.location).endswith("launch.sh:1") and r.exit_code == 4
