"""``kvcheck preflight -f`` end to end: a real subprocess reads manifests written here (in
the shapes of Kubernetes Deployments and launch scripts) and the bundled deployments,
and prints the cluster contract. Exit statuses 0/1/2/4, --allow-unchecked, JSON keys,
JUnit suites and GitHub annotations with file= and line=.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("kvcheck.sources.deployments", reason="deployment readers")
from kvcheck.sources import deployments as _deployments  # noqa: E402

if not hasattr(_deployments, "read_deployments"):
    pytest.skip("read_deployments is not in this build yet", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "configs" / "deployments"


def kvcheck(*args, cwd=None, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "kvcheck", "preflight", *map(str, args)], capture_output=True, text=True, cwd=cwd or ROOT, env=e, timeout=120)


def k8s(name, role, *args, replicas=1, image="lmsysorg/sglang:v0.5.23-cu129", model="meta-llama/Meta-Llama-3.1-8B", env=()):
    arg_lines = "\n".join(f"            - {a}" for a in (f"--model-path={model}", f"--disaggregation-mode={role}", *args))
    env_lines = "".join(f"\n            - name: {k}\n              value: \"{v}\"" for k, v in env)
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {name}
        spec:
          replicas: {replicas}
          selector:
            matchLabels: {{app: {name}}}
          template:
            metadata:
              labels: {{app: {name}}}
            spec:
              containers:
                - name: sglang
                  image: {image}
                  command: ["python3", "-m", "sglang.launch_server"]
                  args:
        """) + textwrap.indent(arg_lines, "      ") + ("\n                  env:" + textwrap.indent(env_lines, "      ") if env else "") + "\n"


NIXL = ("--disaggregation-transfer-backend=nixl", "--tp-size=2", "--page-size=16")


def write(tmp_path, name, *docs):
    p = tmp_path / name
    p.write_text("---\n".join(docs))
    return p


def test_bundled_deployment_passes_as_the_readme_says():
    r = kvcheck("-f", BUNDLED / "llama-nixl-1p2d.yaml", "-o", "json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert c["verdict"] == "pass"
    assert [(i["role"], i["replicas"], i["gpus"], i["sglang_release"]) for i in c["instances"]] == [("prefill", 1, 2, "0.5.23"), ("decode", 2, 2, "0.5.23")]
    assert [p["verdict"] for p in c["pairs"]] == ["pass"]
    # Llama 3.1 8B: 32 layers -> 64 K/V regions, one VRAM -> VRAM segment.
    assert c["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]
    for key in ("instances", "classes", "pairs", "findings", "verdict", "plan", "exit_code"):
        assert key in c


def test_bundled_failing_deployment_points_at_the_decode_line():
    path = BUNDLED / "llama-nixl-page-mismatch.yaml"
    r = kvcheck("-f", path, "--format", "github")
    assert r.returncode == 1
    line = next(x for x in r.stdout.splitlines() if "page-size-mismatch" in x)
    lineno = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "--page-size=32" in t)
    assert f"line={lineno}," in line and "file=" in line


def test_bundled_mooncake_script_is_decided_and_allow_unchecked_exits_0(tmp_path):
    r = kvcheck("-f", BUNDLED / "qwen3-mooncake.sh", "-o", "json", "--sglang-version", "0.5.23")  # the release this rested on (was assumed)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    # the two prefills differ only in ports: one class (the bootstrap ports are checked per instance)
    assert c["verdict"] == "warn" and len(c["instances"]) == 3 and len(c["classes"]) == 2 and len(c["pairs"]) == 1
    # Mooncake's TP2 -> TP4 head-slice path (send_kvcache_slice), decided, not backend-not-modeled
    assert c["pairs"][0]["plan"]["path"] == "hetero_tp_slice"
    assert [f["id"] for f in c["pairs"][0]["findings"] if f["severity"] == "warning"] == ["hetero-tp-performance"]
    # MORI is not modeled: unchecked (exit 4), accepted with --allow-unchecked
    mori = tmp_path / "mori.sh"
    mori.write_text((BUNDLED / "qwen3-mooncake.sh").read_text().replace("--disaggregation-mode", "--disaggregation-transfer-backend mori --disaggregation-mode"))
    r = kvcheck("-f", mori, "-o", "json")
    assert r.returncode == 4 and json.loads(r.stdout)["verdict"] == "unchecked"
    r = kvcheck("-f", mori, "-o", "json", "--allow-unchecked")
    assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "unchecked"
    assert "--allow-unchecked" in r.stderr


def test_replicas_and_classes_from_two_files(tmp_path):
    p = write(tmp_path, "prefill.yaml", k8s("p", "prefill", *NIXL, replicas=3))
    d = write(tmp_path, "decode.yaml", k8s("d-a", "decode", *NIXL, replicas=4), k8s("d-b", "decode", "--disaggregation-transfer-backend=nixl", "--tp-size=2", "--page-size=32"))
    r = kvcheck("-f", p, "-f", d, "-o", "json")
    assert r.returncode == 1, r.stderr
    c = json.loads(r.stdout)
    assert [(i["name"].split("/")[0], i["replicas"], i["class"]) for i in c["instances"]] == [("p", 3, "prefill-1"), ("d-a", 4, "decode-1"), ("d-b", 1, "decode-2")]
    assert [(x["prefill_class"], x["decode_class"], x["verdict"]) for x in c["pairs"]] == [("prefill-1", "decode-1", "pass"), ("prefill-1", "decode-2", "fail")]
    assert c["plan"] == c["pairs"][1]["plan"]  # the first failing pair's


def test_junit_one_suite_per_pair(tmp_path):
    f = write(tmp_path, "all.yaml", k8s("p", "prefill", *NIXL), k8s("d", "decode", *NIXL))
    r = kvcheck("-f", f, "-o", "junit")
    assert r.returncode == 0
    names = [s.get("name") for s in ET.fromstring(r.stdout).iter("testsuite")]
    assert names == ["kvcheck pair prefill-1 x decode-1", "kvcheck cluster"]


def test_unresolved_variable_then_env_file(tmp_path):
    f = write(tmp_path, "vars.yaml", k8s("p", "prefill", "--disaggregation-transfer-backend=nixl", "--tp-size=$(TP)", "--page-size=16"), k8s("d", "decode", *NIXL))
    r = kvcheck("-f", f, "-o", "json")
    assert r.returncode == 4, r.stderr
    msgs = [x["message"] for p in json.loads(r.stdout)["pairs"] for x in p["findings"] if x["id"] == "unresolved-variable"]
    assert msgs and "TP is not set" in msgs[0]
    env = tmp_path / "prod.env"
    env.write_text("TP=2\n")
    r = kvcheck("-f", f, "-o", "json", "--env", env)
    assert r.returncode == 0, r.stderr


def test_unknown_model_then_models_dir(tmp_path):
    f = write(tmp_path, "m.yaml", k8s("p", "prefill", *NIXL, model="acme/Tiny-1B"), k8s("d", "decode", *NIXL, model="acme/Tiny-1B"))
    r = kvcheck("-f", f, "-o", "json", env={"HF_HOME": str(tmp_path / "nohf"), "HF_HUB_CACHE": ""})
    assert r.returncode == 4
    assert any(x["id"] == "unknown-model" and "acme/Tiny-1B" in x["message"] for x in json.loads(r.stdout)["pairs"][0]["findings"])
    snap = tmp_path / "hub" / "models--acme--Tiny-1B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512, "torch_dtype": "bfloat16"}))
    r = kvcheck("-f", f, "-o", "json", "--models", tmp_path / "hub")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert c["instances"][0]["model_source"].startswith("Hugging Face cache")
    assert c["plan"]["n_src"] == 8  # 4 layers x (K, V)


def test_usage_errors_exit_2(tmp_path):
    f = write(tmp_path, "all.yaml", k8s("p", "prefill", *NIXL), k8s("d", "decode", *NIXL))
    r = kvcheck("-f", f, "--prefill", ROOT / "configs/aligned/prefill.yaml")
    assert r.returncode == 2 and "not both" in r.stderr and "Traceback" not in r.stderr
    r = kvcheck("-f", tmp_path / "missing.yaml")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = kvcheck("--prefill", ROOT / "configs/aligned/prefill.yaml")
    assert r.returncode == 2
    bad = write(tmp_path, "bad.yaml", k8s("p", "prefill", *NIXL, "--page-sise=16"), k8s("d", "decode", *NIXL))
    r = kvcheck("-f", bad)  # a server flag the runtime refuses: that server's start-up refusal (issue 14)
    assert r.returncode == 1 and "bad.yaml" in r.stdout and "--page-size" in r.stdout and "startup-argparse" in r.stdout


def test_single_pair_contract_unchanged_with_o():
    r = kvcheck("--prefill", ROOT / "configs/aligned/prefill.yaml", "--decode", ROOT / "configs/aligned/decode.yaml", "-o", "json",
                "--sglang-version", "0.5.23")  # the release the old pair path assumed (installed SGLang)
    assert r.returncode == 0
    c = json.loads(r.stdout)
    assert set(c) >= {"verdict", "plan", "findings"} and "pairs" not in c


def test_a_start_up_refusal_of_the_prefill_points_at_the_prefill_line(tmp_path):
    # The prefill's --tp-size 3 is not a multiple of attention DP 2 (SGLang 0.5.23's
    # ServerArgs check refuses it at start-up); both lines set --tp-size, and the
    # annotation names the prefill's, not the decode's.
    launch = "python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3.1-8B --disaggregation-transfer-backend nixl --page-size 16"
    script = tmp_path / "run.sh"
    script.write_text(f"{launch} --disaggregation-mode decode --tp-size 2 --port 30001\n"
                      f"{launch} --disaggregation-mode prefill --tp-size 3 --dp-size 2 --enable-dp-attention\n")
    r = kvcheck("-f", script, "-o", "github", "--sglang-version", "0.5.23")  # the release this rested on (was assumed)
    assert r.returncode == 1, r.stdout
    line = next(x for x in r.stdout.splitlines() if "tp-attn-dp-cp" in x)
    assert "file=run.sh,line=2," in line or f"file={script},line=2," in line, line
