"""A new user's first hour (issue 10): ``--version``; output not wrapped or cut when
piped; ``--model-config`` takes a model directory; ``host:port`` is a live server; the
env-file parser keeps unquoted JSON; a draft model given as a hub id is told to use
``--draft-model-config``."""

from __future__ import annotations

import json
import re

from helpers import REPO, model_dir, run_cli, write_config

from kvcheck import RUNTIME_VERSION, __version__
from kvcheck.sources.files import read_env_file

PREFILL = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16}
DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


def test_version_names_kvcheck_and_the_modeled_sglang_release():
    for flag in ("--version", "-V"):
        proc = run_cli(flag)
        assert proc.returncode == 0, proc.stderr
        from kvcheck.sglang.releases import describe_modeled, modeled

        assert proc.stdout.startswith(f"kvcheck {__version__} ") and f"SGLang {describe_modeled()}" in proc.stdout
        # the top-level help's range (the PD path) is said too, as such
        from kvcheck.release.manifest import pd_releases

        pd = pd_releases()
        assert f"the PD path of {pd[0]} to {pd[-1]} ({len(pd)} releases)" in proc.stdout
        assert f"releases {pd[0]} to {pd[-1]}" in " ".join(run_cli("--help").stdout.split())
        assert RUNTIME_VERSION == modeled()[-1] and RUNTIME_VERSION in proc.stdout


def test_piped_table_output_is_not_wrapped_at_80_columns():
    pair = REPO / "configs" / "failing"
    proc = run_cli("preflight", "--prefill", str(pair / "prefill.yaml"), "--decode", str(pair / "decode.yaml"))  # stdout is a pipe
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    # The runtime error arrives on one line, whole (rich wrapped it at 80 columns before).
    runtime = [line for line in lines if "runtime: ValueError" in line]
    assert len(runtime) == 1 and runtime[0].rstrip().endswith("unexpected geometry"), lines
    assert max(map(len, lines)) > 100


def test_model_config_accepts_a_model_directory(tmp_path):
    p = tmp_path / "prefill.yaml"
    p.write_text("model-path: meta-llama/Llama-3.1-8B-Instruct\n" + "".join(f"{k}: {v}\n" for k, v in PREFILL.items()))
    d = tmp_path / "decode.yaml"
    d.write_text("model-path: meta-llama/Llama-3.1-8B-Instruct\n" + "".join(f"{k}: {v}\n" for k, v in DECODE.items()))
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--model-config", str(model_dir("llama-3.1-8b")), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "pass"
    empty = tmp_path / "empty-model"
    empty.mkdir()
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--model-config", str(empty))
    assert proc.returncode == 2 and "holds no config.json" in proc.stderr and "--model-config" in proc.stderr


def test_env_file_keeps_unquoted_json_and_quoted_values(tmp_path):
    env = tmp_path / "prefill.env"
    env.write_text(
        'SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS={"num_threads": "8", "x": "a b"}\n'
        "export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1   # the two NICs\n"
        "SGLANG_QUOTED='two words'\n"
        'SGLANG_DQ="x=1"\n'
    )
    got = read_env_file(env)
    assert got["SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS"] == '{"num_threads": "8", "x": "a b"}'
    assert json.loads(got["SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS"]) == {"num_threads": "8", "x": "a b"}
    assert got["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert got["SGLANG_QUOTED"] == "two words" and got["SGLANG_DQ"] == "x=1"
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", PREFILL)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--prefill-env", str(env), "--format", "json")
    ids = [f["id"] for f in json.loads(proc.stdout)["findings"]]
    assert "nixl-backend-params" not in ids, proc.stdout


def test_a_draft_model_hub_id_is_told_to_use_draft_model_config(tmp_path):
    spec = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "org/some-eagle3-draft",
            "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4}
    p = write_config(tmp_path, "prefill", "llama-3.1-8b", {**PREFILL, **spec})
    d = write_config(tmp_path, "decode", "llama-3.1-8b", {**DECODE, **spec})
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d))
    # As with -f: a model kvcheck cannot read is unknown-model (unchecked, exit 4), and the
    # fix names the draft's own option.
    assert proc.returncode == 4, proc.stderr
    assert "--draft-model-config" in proc.stdout and "--speculative-draft-model-path" in proc.stdout
    assert not re.search(r"[Pp]ass --model-config", proc.stdout)


def test_the_ci_example_installs_kvcheck_from_its_repository_not_pypi():
    import yaml

    wf = yaml.safe_load((REPO / "configs" / "ci" / "kvcheck-preflight.yml").read_text())
    runs = [s.get("run", "") for s in wf["jobs"]["preflight"]["steps"]]
    install = next(r for r in runs if "pip install" in r)
    # From the checked-out repository itself (the gate runs in the repository that holds kvcheck
    # or a checkout of it), never a package name on PyPI.
    assert re.search(r"pip install (-e )?\.(\s|$)", install), install
    assert not re.search(r"pip install\s+kvcheck\b", install)


def test_the_api_key_option_lines_up_in_help_after_the_secret_scrubber():
    # every output line passes the secret scrubber, which wrote "<redacted>" over the
    # option's metavar after the columns were laid out ("--api-key <redacted>      Bearer")
    for cmd in ("preflight", "snapshot"):
        lines = run_cli(cmd, "--help").stdout.splitlines()
        i = next(k for k, ln in enumerate(lines) if ln.lstrip().startswith("--api-key"))
        key, more = lines[i], lines[i + 1]  # the help text wraps onto the next line, at its column
        assert key.lstrip().startswith("--api-key <redacted> ")
        assert key.index("Bearer") == len(more) - len(more.lstrip()), (cmd, key, more)
