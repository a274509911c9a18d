"""Shapes a blind run on published deployments found misread (notes/blind.md, kinds C-F, J).

Every file here is written by the test, in the shape the published ones have:

* C: helper files among several ``-f`` files (a router-only script, a ``00_common.sh`` of
  variables, sourced or not) are one deployment with the others, never bad input;
  ``source FILE`` is followed under the read root; ``--env`` takes a shell file.
* D: a ``--disaggregation-mode`` value SGLang refuses is the server's start-up refusal,
  with the text of SGLang's own argument parser; ``null`` is a server outside PD.
* E: ``X="$X more"`` and ``export LD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH`` twice are
  assignments run in order; ``eval "$CMD"`` is read.
* F: nodes sharing a ``--dist-init-addr`` that disagree on ``--nnodes`` are one instance
  whose nodes disagree (``multinode-args``), not two instances that pass.
* J: unresolved values keep their ``$`` syntax in messages; an unset ``--model-path``
  is reported once.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from helpers import model_dir

from kvcheck.cluster.pipeline import ClusterOptions, check_deployments
from kvcheck.errors import InputError
from kvcheck.sources.deployments import read_deployments

LAUNCH = "python -m sglang.launch_server"
OPTS = ClusterOptions(sglang_version="0.5.23", gpu="h100")


def _model() -> str:
    return str(model_dir("llama-3.1-8b"))


def _p(extra: str = "") -> str:
    return f"{LAUNCH} --model-path {_model()} --disaggregation-mode prefill --port 30000 --page-size 16 {extra}\n"


def _d(extra: str = "") -> str:
    return f"{LAUNCH} --model-path {_model()} --disaggregation-mode decode --port 30001 --page-size 16 {extra}\n"


ROUTER = "python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 --decode http://127.0.0.1:30001 --port 8000\n"


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _run(paths, **kw):
    deps = read_deployments(list(paths), **kw)
    return check_deployments(deps, OPTS)


def _ids(report) -> list[str]:
    return [x.finding.id for _, x in report.all_findings()]


# -- C: several files are one deployment -----------------------------------------------


def test_router_only_and_variables_only_files_join_the_deployment(tmp_path):
    one = _run([_write(tmp_path, "all.sh", _p() + _d() + ROUTER)])
    files = [_write(tmp_path, "common.sh", "#!/bin/bash\nset -e\nexport PAGE=16\nMODEL=x\n"),
             _write(tmp_path, "prefill.sh", _p()), _write(tmp_path, "decode.sh", _d()), _write(tmp_path, "router.sh", ROUTER)]
    several = _run(files)
    assert one.exit_code == several.exit_code == 0
    [dep] = several.deployments
    assert {i.instance.role for i in dep.instances} == {"prefill", "decode"}
    [router] = dep.deployment.routers
    assert router.prefills[0].instance and router.decode_instances[0]  # linked across the files
    assert sorted(_ids(one)) == sorted(_ids(several))


def test_helper_variables_feed_the_other_files_as_a_source_would(tmp_path):
    common = _write(tmp_path, "00_common.sh", f'MODEL_PATH="${{MODEL_PATH:-{_model()}}}"\nPAGE=32\n')
    prefill = _write(tmp_path, "p.sh", f"{LAUNCH} --model-path $MODEL_PATH --disaggregation-mode prefill --page-size $PAGE\n")
    decode = _write(tmp_path, "d.sh", f"PAGE=16\n{LAUNCH} --model-path $MODEL_PATH --disaggregation-mode decode --port 30001 --page-size $PAGE\n")
    r = _run([prefill, decode, common])
    by_role = {i.instance.role: i.instance.argv for i in r.deployments[0].instances}
    assert by_role["prefill"][1] == _model() and by_role["prefill"][-1] == "32"
    assert by_role["decode"][-1] == "16"  # the file's own assignment comes after the "source"
    assert r.exit_code == 1  # 32 against 16: the pages disagree, as the files say


def test_a_lone_file_without_servers_is_still_bad_input(tmp_path):
    with pytest.raises(InputError, match="no SGLang launch line"):
        read_deployments([_write(tmp_path, "common.sh", "MODEL=x\n")])
    with pytest.raises(InputError, match="none of the -f files launches an SGLang server"):
        read_deployments([_write(tmp_path, "a.sh", "A=1\n"), _write(tmp_path, "b.sh", "B=2\n")])


def test_source_is_followed_beside_the_script_and_under_the_root(tmp_path):
    _write(tmp_path, "scripts/00_common.sh", f"MODEL_PATH={_model()}\nexport LD_LIBRARY_PATH=/opt/x:$LD_LIBRARY_PATH\n")
    script = _write(tmp_path, "scripts/run.sh",
                    'source "$(dirname "$0")/00_common.sh"\n'
                    'DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n. "$DIR/00_common.sh"\n'
                    f"{LAUNCH} --model-path $MODEL_PATH --disaggregation-mode prefill --page-size 16\n"
                    f"{LAUNCH} --model-path $MODEL_PATH --disaggregation-mode decode --port 30001 --page-size 16\n")
    r = _run([script])
    assert r.exit_code == 0 and not any(i.instance.unresolved for i in r.deployments[0].instances)


def test_a_source_that_cannot_be_read_leaves_its_variables_unresolved(tmp_path):
    _write(tmp_path, "outside/common.sh", f"MODEL_PATH={_model()}\n")
    body = f"{LAUNCH} --model-path $MODEL_PATH --disaggregation-mode prefill --page-size 16\n" \
           f"{LAUNCH} --model-path $MODEL_PATH --disaggregation-mode decode --port 30001 --page-size 16\n"
    script = _write(tmp_path, "deploy/run.sh", "source ../outside/common.sh\nsource $SGL_WS_PATH/set_env_vars.sh\n" + body)
    r = _run([script])
    assert r.exit_code == 4  # never 2: the variables are unresolved
    ids = _ids(r)
    assert ids.count("source-not-read") == 2 and "unresolved-variable" in ids
    msgs = " ".join(x.finding.message for _, x in r.all_findings() if x.finding.id == "source-not-read")
    assert "outside the directory kvcheck may read" in msgs and "$SGL_WS_PATH" in msgs
    # the same file given with -f is the user's own choice: read
    r2 = _run([script, tmp_path / "outside/common.sh"])
    assert r2.exit_code == 0


def test_env_takes_a_shell_file_of_assignments(tmp_path):
    from kvcheck.sources.files import read_env_file

    env = read_env_file(_write(tmp_path, "common.sh", '#!/usr/bin/env bash\nset -euo pipefail\nif [ -z "$X" ]; then echo hi; fi\n'
                                                      'MODEL_PATH="${MODEL_PATH:-org/m}"\nexport TP=8\nPORT=$((30000 + 1))\n'))
    assert env == {"MODEL_PATH": "org/m", "TP": "8"}  # $((...)) is never evaluated


# -- D: --disaggregation-mode values the runtime refuses ---------------------------------


def _sglang_refusal(argv: list[str]) -> str:
    """The text after "error: " of SGLang 0.5.23's own argument parser."""
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(err):
        prepare_server_args(["--model-path", _model()] + argv)
    return err.getvalue().strip().splitlines()[-1].split("error: ", 1)[1]


@pytest.mark.runtime
def test_a_mode_typo_is_that_servers_start_up_refusal(tmp_path):
    script = _write(tmp_path, "typo.sh", _p().replace("prefill", "prefil", 1) + _d())
    r = _run([script])
    assert r.exit_code == 1
    [f] = [x for _, x in r.all_findings() if x.finding.id == "startup-argparse"]
    real = _sglang_refusal(["--disaggregation-mode", "prefil"])
    assert "invalid choice: 'prefil'" in real and real in f.finding.message
    assert str(f.location).endswith("typo.sh:1") and "missing-role" not in _ids(r)


@pytest.mark.runtime
def test_a_mode_no_release_has_is_a_refusal_not_a_missing_launch_line(tmp_path):
    script = _write(tmp_path, "epd.sh", _p().replace("prefill", "encode", 1) + _d())
    r = _run([script])
    assert r.exit_code == 1
    [f] = [x for _, x in r.all_findings() if x.finding.id == "startup-argparse"]
    assert _sglang_refusal(["--disaggregation-mode", "encode"]) in f.finding.message and str(f.location).endswith("epd.sh:1")
    alone = _run([_write(tmp_path, "enc.sh", _p().replace("prefill", "encode", 1))])
    assert alone.exit_code == 1 and _ids(alone) == ["startup-argparse"]
    manifest = _write(tmp_path, "enc.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: enc}\nspec:\n  containers:\n  - name: s\n"
                                            f"    command: [python3, -m, sglang.launch_server, --model-path, {_model()}, --disaggregation-mode, encode]\n")
    k8s = _run([manifest])
    assert k8s.exit_code == 1 and _ids(k8s) == ["startup-argparse"]


def test_a_null_mode_server_is_named_as_a_server_outside_pd(tmp_path):
    null = _p().replace("prefill", "null", 1)
    with pytest.raises(InputError) as exc:
        read_deployments([_write(tmp_path, "agg.sh", null)])
    assert "without --disaggregation-mode prefill|decode" in str(exc.value) and "no SGLang launch line" not in str(exc.value)
    manifest = _write(tmp_path, "agg.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: agg}\nspec:\n  template:\n    spec:\n"
                                            "      containers:\n      - name: s\n        image: lmsysorg/sglang:v0.5.23\n"
                                            f"        command: [python3, -m, sglang.launch_server, --model-path, {_model()}]\n")
    with pytest.raises(InputError) as exc:
        read_deployments([manifest])
    assert "agg.yaml" in str(exc.value) and "line 10" in str(exc.value) and "no container launches" not in str(exc.value)
    # next to PD servers (another -f file), it takes no part in KV transfer: a warning
    r = _run([_write(tmp_path, "pd.sh", _p() + _d()), tmp_path / "agg.sh"])
    assert r.exit_code == 0 and "not-disaggregated" in _ids(r)


# -- E: assignments in order, eval -------------------------------------------------------


def test_self_appending_variables_and_eval_of_a_built_command(tmp_path):
    script = _write(tmp_path, "run.sh",
                    "export LD_LIBRARY_PATH=/opt/efa/lib:$LD_LIBRARY_PATH\nexport LD_LIBRARY_PATH=/opt/x/lib:$LD_LIBRARY_PATH\n"
                    f'CMD="{LAUNCH} --model-path {_model()} --disaggregation-mode prefill"\nCMD="$CMD --page-size 16"\neval "$CMD"\n'
                    f'D="{LAUNCH} --model-path $MODEL --disaggregation-mode decode --port 30001"\nD="$D --page-size 16"\n$D &\n')
    [dep] = read_deployments([script], env={})
    p, d = sorted(dep.instances, key=lambda i: i.role, reverse=True)
    assert p.role == "prefill" and p.argv[-2:] == ["--page-size", "16"]
    assert d.role == "decode" and [(u.variable, u.flag) for u in d.unresolved] == [("MODEL", "--model-path")]
    r = check_deployments([dep], OPTS)
    msgs = [x.finding.message for _, x in r.all_findings() if x.finding.id == "unresolved-variable"]
    assert msgs and all("`--model-path $MODEL`" in m for m in msgs)
    assert "unknown-model" not in _ids(r)  # the unset --model-path is said once


# -- F: nodes of one instance that disagree on --nnodes ----------------------------------


def test_nodes_sharing_a_rendezvous_with_different_nnodes_are_one_instance(tmp_path):
    def node(role, host, addr, nn, rank, port):
        return (f"{LAUNCH} --model-path {_model()} --tp-size 16 --host {host} --dist-init-addr {addr}:5000 --nnodes {nn} "
                f"--node-rank {rank} --disaggregation-mode {role} --page-size 16 --port {port}\n")

    script = _write(tmp_path, "two-node.sh", node("prefill", "10.0.0.1", "10.0.0.1", 1, 0, 30000) + node("prefill", "10.0.0.2", "10.0.0.1", 2, 1, 30000)
                    + node("decode", "10.0.0.3", "10.0.0.3", 2, 0, 30001) + node("decode", "10.0.0.4", "10.0.0.3", 2, 1, 30001))
    r = _run([script])
    assert r.exit_code == 1
    assert [i.instance.role for i in r.deployments[0].instances] == ["prefill", "decode"]
    msg = next(x.finding.message for _, x in r.all_findings() if x.finding.id == "multinode-args" and "disagree on --nnodes" in x.finding.message)
    assert "two-node.sh:1): 1" in msg and "two-node.sh:2): 2" in msg


def test_nodes_of_one_instance_with_different_rendezvous_addresses_are_one_instance(tmp_path):
    # the prefill's node 1 names another --dist-init-addr than its node 0: each node joins
    # torch.distributed at its own address (0.5.23 _resolve_dist_init_method), so the two
    # never form the group; once read as two instances of one node each, nothing was said
    def node(role, addr, rank, port):
        return (f"{LAUNCH} --model-path {_model()} --tp-size 16 --host 10.0.0.{rank + 1} --dist-init-addr {addr}:5000 "
                f"--nnodes 2 --node-rank {rank} --disaggregation-mode {role} --page-size 16 --port {port}\n")

    script = _write(tmp_path, "split.sh", node("prefill", "10.0.0.1", 0, 30000) + node("prefill", "10.0.0.2", 1, 30000)
                    + node("decode", "10.0.0.3", 0, 30001) + node("decode", "10.0.0.3", 1, 30001))
    r = _run([script])
    assert r.exit_code == 1
    insts = r.deployments[0].instances
    assert [(i.instance.role, i.instance.nodes, len(i.instance.node_argvs)) for i in insts] == [("prefill", 2, 2), ("decode", 2, 2)]
    (msg,) = [x.finding.message for _, x in r.all_findings() if x.finding.id == "multinode-args"]
    assert "disagree on --dist-init-addr" in msg and "split.sh:1): 10.0.0.1:5000" in msg and "split.sh:2): 10.0.0.2:5000" in msg
    # two instances whose node 0 lines name their own addresses stay two (their ranks overlap)
    two = _write(tmp_path, "two.sh", node("prefill", "10.0.0.1", 0, 30000) + node("prefill", "10.0.0.2", 0, 30000)
                 + node("decode", "10.0.0.3", 0, 30001) + node("decode", "10.0.0.3", 1, 30001))
    r = _run([two])
    assert [i.instance.role for i in r.deployments[0].instances] == ["prefill", "prefill", "decode"]


# -- J: the written syntax of an unresolved value ---------------------------------------


def test_unresolved_addresses_keep_their_variable_syntax(tmp_path):
    script = _write(tmp_path, "ports.sh", _p().replace("--port 30000", "--port ${PREFILL_PORT} --host $HOST_IP") + _d())
    [dep] = read_deployments([script], env={})
    msgs = [p.message for p in dep.problems if p.id == "unresolved-address"]
    assert any("`--port ${PREFILL_PORT}`" in m for m in msgs) and any("`--host $HOST_IP`" in m for m in msgs)


# -- G: reruns in a terminal transcript ------------------------------------------------


def test_a_command_typed_again_in_a_transcript_is_a_rerun(tmp_path):
    prompt = "[me@node01 ~]$ "
    text = prompt + _p() + "Traceback (most recent call last):\n  KeyboardInterrupt\n" + prompt + _p() + prompt + _d()
    [dep] = read_deployments([_write(tmp_path, "session.txt", text)])
    assert sorted(i.role for i in dep.instances) == ["decode", "prefill"]
    [dep] = read_deployments([_write(tmp_path, "script.sh", _p() + _p() + _d())])  # a script starts both
    assert sorted(i.role for i in dep.instances) == ["decode", "prefill", "prefill"]


def test_a_script_whose_servers_start_in_an_unread_sourced_file_is_unchecked(tmp_path):
    # a CI script calling launch_sglang_server from a common.sh that is not here
    script = _write(tmp_path, "ci/test_1p1d.sh", '. ${BASE_DIR}/scripts/common.sh\nlaunch_sglang_server "$MODEL" prefill 30001\n')
    r = _run([script])
    assert r.exit_code == 4 and "servers-not-read" in _ids(r) and "source-not-read" in _ids(r)


def test_sourcing_is_bounded(tmp_path, monkeypatch):
    from kvcheck.sources.deployments import sourcing

    monkeypatch.setattr(sourcing, "MAX_SOURCED_BYTES", 1000)
    _write(tmp_path, "big.sh", "X=1\n" + "#" * 600 + "\n")
    script = _write(tmp_path, "run.sh", ". ./big.sh\n. ./big.sh\n. ./run.sh\n" + _p() + _d())
    [dep] = read_deployments([script])
    msgs = [p.message for p in dep.problems if p.id == "source-not-read"]
    assert len(msgs) == 2 and "MiB read from sourced files" in msgs[0] and "inside itself" in msgs[1]
