"""Every clue to a side's SGLang release, and the NIXL release of the server.

Release dates and Dynamo pins are the project's cited tables (PyPI); the example inputs
are written here, in the shapes published deployments use.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from helpers import run_cli, write_config
from kvcheck.sglang.releases import read_image, release_from_image
from kvcheck.sources.deployments import read_deployments
from kvcheck.sources.release_clues import (
    STRENGTH_CLI,
    STRENGTH_RANGE,
    clue_from_cli,
    clue_from_image,
    clues_for_instance,
    clues_from_text,
    disagreement,
)


@pytest.mark.parametrize(
    "image,releases",
    [
        ("lmsysorg/sglang:v0.5.8.post1-cu126", ("0.5.8.post1",)),
        ("docker.io/lmsysorg/sglang:v0.5.9-cu129-amd64", ("0.5.9",)),
        ("myreg.io/team/sglang-pd:v0.5.5.post3-nixl-1.0", ("0.5.5.post3",)),
        ("ghcr.io/acme/sgl-serving:v0.5.21-cu130", ("0.5.21",)),
        ("sglang-v0.5.11-cu130", ("0.5.11",)),  # srt-slurm container aliases
        ("v0.5.13.post1", ("0.5.13.post1",)),
        ("0.5.6.post2", ("0.5.6.post2",)),
        ("/shared/containers/lmsysorg+sglang+v0.5.10.sqsh", ("0.5.10",)),  # enroot file
        ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.7.1", ("0.5.4.post3",)),  # ai-dynamo 0.7.1 METADATA
        # dated builds: the releases on either side of the date (PyPI upload dates)
        ("lmsysorg/sglang:nightly-dev-20260520-abc1234", ("0.5.12", "0.5.12.post1", "0.5.13")),
        ("lmsysorg/sglang:dev-cu13-20260520", ("0.5.12", "0.5.12.post1", "0.5.13")),
        ("rocm/sgl-dev:v0.5.8-rocm700-mi35x-20260125", ("0.5.8", "0.5.8.post1", "0.5.9")),
        ("sglang-nightly-dev-cu13-20260510", ("0.5.11", "0.5.12")),
        # no modeled release
        ("lmsysorg/sglang:nightly-dev-20261120-425dffbd", ()),  # after the newest modeled
        ("lmsysorg/sglang:latest", ()),
        ("lmsysorg/sglang:v0.5.9-dev-cu129", ()),
        ("dynamo-sglang", ()),  # without the recipe's dynamo.version
        ("dev-0318", ()),
        ("vllm/vllm-openai:v0.10.0", ()),
        ("lmsysorg/sglang:v0.4.9", ()),
    ],
)
def test_image_clues(image, releases):
    clue = clue_from_image(image)
    assert clue.releases == releases, clue
    assert clue.text and (releases or clue.problem)
    if len(releases) > 1:
        assert clue.window and clue.strength == STRENGTH_RANGE and release_from_image(image)[0] is None


def test_nightly_after_the_newest_modeled_release_fails_closed():
    got = read_image("lmsysorg/sglang:nightly-dev-20261120-425dffbd")
    assert got.window and not got.releases and "newer than the newest release kvcheck models" in got.problem


def test_dynamo_alias_maps_through_the_recipe_dynamo_version():
    assert clue_from_image("dynamo-sglang", dynamo_version="1.1.0").releases == ("0.5.10.post1",)
    assert clue_from_image("dynamo-sglang", dynamo_version="7.7.7").releases == ()


def test_cli_clue_wins_and_names_unmodeled():
    assert clue_from_cli("v0.5.9").releases == ("0.5.9",) and clue_from_cli("0.5.9").strength == STRENGTH_CLI
    assert clue_from_cli("0.6.0").releases == () and "not a release kvcheck models" in clue_from_cli("0.6.0").problem


def test_pip_install_lines():
    text = textwrap.dedent("""\
        #!/bin/bash
        pip install sglang==0.5.9
        uv pip install "sglang[all]==0.5.8.post1" --prerelease=allow
        RUN pip install --no-cache-dir \\
            "sglang[all]>=0.5.21" nixl
        pip install sglang-router==0.3.0
        python3 -m pip install 'sglang>=0.5.10,<0.5.11'
        pip install sglang
        """)
    got = clues_from_text(text, "run.sh")
    assert [(c.releases, c.location) for c in got[:2]] == [(("0.5.9",), "run.sh:2"), (("0.5.8.post1",), "run.sh:3")]
    rng = got[2]
    assert rng.location == "run.sh:4" and rng.window and rng.beyond_newest and rng.releases == ("0.5.21", "0.5.22", "0.5.23")
    assert got[3].releases == ("0.5.10", "0.5.10.post1") and not got[3].beyond_newest
    assert got[4].releases == () and "names no version" in got[4].problem
    assert len(got) == 5  # sglang-router is another package


def test_script_and_recipe_clues_reach_the_instances(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(textwrap.dedent("""\
        pip install "sglang[all]==0.5.13"
        python3 -m sglang.launch_server --model-path /m --disaggregation-mode prefill --port 30000
        python3 -m sglang.launch_server --model-path /m --disaggregation-mode decode --port 30001
        """))
    dep = read_deployments([script])[0]
    for inst in dep.instances:
        assert [c.releases for c in clues_for_instance(inst)] == [("0.5.13",)]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent("""\
        name: two-clues
        model: {path: "hf:Qwen/Qwen3-8B", container: "lmsysorg/sglang:v0.5.12-cu130", precision: bf16}
        identity:
          frameworks: {sglang: "0.5.11", dynamo: "1.2.1"}
        resources: {gpu_type: h100, gpus_per_node: 8, prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1}
        backend:
          type: sglang
          sglang_config:
            prefill: {tp-size: 8}
            decode: {tp-size: 8}
        """))
    inst = read_deployments([recipe])[0].instances[0]
    clues = clues_for_instance(inst)
    assert [c.releases for c in clues] == [("0.5.12",), ("0.5.11",)]  # both kept
    assert clues[1].location == f"{recipe}:4"
    said = disagreement(clues)
    assert "disagree" in said and "0.5.12" in said and "0.5.11" in said


def test_srt_slurm_dynamo_container_with_dynamo_version(tmp_path):
    recipe = tmp_path / "dyn.yaml"
    recipe.write_text(textwrap.dedent("""\
        name: dyn
        model: {path: "hf:Qwen/Qwen3-8B", container: dynamo-sglang, precision: bf16}
        dynamo: {version: "1.0.1"}
        resources: {gpu_type: h100, gpus_per_node: 8, prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1}
        backend:
          sglang_config:
            prefill: {tp-size: 8}
            decode: {tp-size: 8}
        """))
    inst = read_deployments([recipe])[0].instances[0]
    clues = clues_for_instance(inst)
    assert [c.releases for c in clues] == [("0.5.9",)] and "dynamo.version 1.0.1" in clues[0].text


# ---------------------------------------------------------------------------------------
# the NIXL release of the server
# ---------------------------------------------------------------------------------------


class _Side:
    def __init__(self, image=None, env=None):
        self.image, self.env = image, env or {}


@pytest.mark.parametrize(
    "image,env,expect",
    [
        ("lmsysorg/sglang:v0.5.18-cu130", {}, (">= 1.4.0", "yes-for-[1.4.0,None)")),
        ("lmsysorg/sglang:v0.5.13.post1", {}, (">= 1.2.0", None)),
        ("myreg.io/team/sglang-pd:v0.5.5.post3-nixl-1.0", {"NIXL_VERSION": "0.9.0"}, (">= 1.0.0, < 1.1.0", None)),
        ("myreg.io/team/sglang-pd:v0.5.5.post3", {"NIXL_VERSION": "0.9.0"}, ("0.9.0", None)),
        ("sglang-v0.5.11-cu130", {}, ("unknown", None)),  # a cluster alias: which image is unknown
        (None, {}, ("unknown", None)),
    ],
)
def test_server_nixl(image, env, expect):
    from kvcheck.sglang.server_nixl import nixl_in, server_nixl

    got = server_nixl(_Side(image, env))
    assert got.describe() == expect[0], got
    if image == "lmsysorg/sglang:v0.5.18-cu130":
        assert nixl_in(got, [[None, "1.1.0"]]) == "no" and nixl_in(got, [["1.0.0", None]]) == "yes"
        assert nixl_in(got, [[None, "1.5.0"]]) == "maybe"
    if not got.known:
        assert nixl_in(got, [[None, "1.1.0"]]) == "maybe"


def test_known_issue_takes_the_nixl_of_the_image_not_of_this_venv(tmp_path):
    """Same deployment, same answer in any venv: SGLang 0.5.15 needs NIXL 1.1.0; the
    0.5.15 image ships at least 1.3.1 (installed unpinned after 1.3.1's release), while a
    custom image tagged nixl-1.0 ships 1.0.x: a start-up refusal, an error."""
    from kvcheck.checks.releases import known_issue
    from kvcheck.checks.base import REGISTRY, CheckContext
    from kvcheck.sources import load_side

    def side(role, image):
        path = write_config(tmp_path, role, "llama-3.1-8b", {"disaggregation-mode": role, "disaggregation-transfer-backend": "nixl", "page-size": 16})
        s = load_side(str(path), role, sglang_version="0.5.15")
        s.image = image
        return s

    def found(image):
        ctx = CheckContext(prefill=side("prefill", image), decode=side("decode", image), prefill_geometry=None, decode_geometry=None, plan=None, extra={})
        return [f for f in REGISTRY["known-issue"].run(ctx) if "needs-nixl-1.1" in f.message]

    assert known_issue is not None and found("lmsysorg/sglang:v0.5.15-cu129") == []
    hits = found("myreg.io/team/sglang-pd:v0.5.15-nixl-1.0")
    assert hits and hits[0].severity == "error" and "NIXL >= 1.0.0, < 1.1.0 (image tag myreg.io" in hits[0].message
    unseen = found(None)  # nothing says: named, and what to pin
    assert unseen and unseen[0].severity == "info" and "the prefill's NIXL is < 1.1.0" in unseen[0].message
    assert "NIXL_VERSION" in unseen[0].fix
    # the check documents the rule these three answers follow (it is listed as [error])
    what = " ".join(REGISTRY["known-issue"].what.split())
    assert REGISTRY["known-issue"].severity == "error"
    assert "error when the defect is an error and every condition it depends on was seen" in what
    assert "info for a start-up refusal that depends only on a NIXL release kvcheck cannot see" in what


def test_deployment_file_image_decides_the_nixl_issue(tmp_path):
    """-f: the image of the manifest reaches the known-issue check (exit codes come from
    kvcheck's own CLI on an example deployment written here)."""
    model = write_config(tmp_path, "unused", "llama-3.1-8b", {}).read_text().split(": ", 1)[1].strip()
    script = tmp_path / "compose.yaml"
    script.write_text(textwrap.dedent(f"""\
        services:
          prefill:
            image: myreg.io/team/sglang-pd:v0.5.15-nixl-1.0
            command: python3 -m sglang.launch_server --model-path {model} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000
          decode:
            image: myreg.io/team/sglang-pd:v0.5.15-nixl-1.0
            command: python3 -m sglang.launch_server --model-path {model} --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001
        """))
    proc = run_cli("preflight", "-f", str(script), "--format", "json", "--gpu", "h100")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "sglang-0.5.15-needs-nixl-1.1" in proc.stdout and "myreg.io/team/sglang-pd:v0.5.15-nixl-1.0" in proc.stdout
    json.loads(proc.stdout)
