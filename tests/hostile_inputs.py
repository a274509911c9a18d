"""Hostile deployment inputs, written by kvcheck's own tests (never copied from anywhere):
the reproductions of issue 17, each as a function that writes its file(s) under a
directory and returns the kvcheck arguments that read it.

Shared by ``tests/test_hostile.py`` (exit status, time, peak memory, no leak, no file
read outside the root) and ``benchmarks/bench_hostile.py`` (cost of each shape at 50 MiB).
"""

from __future__ import annotations

import json
from pathlib import Path

LAUNCH = "python -m sglang.launch_server"
# A secret planted in a file kvcheck must not read or show; it never appears in output.
CANARY = "sk_live_CANARY0123456789abcdef"


def recipe(resources: dict, *, sweep: dict | None = None, extra: dict | None = None) -> dict:
    """A minimal srt-slurm recipe (the shape of NVIDIA/srt-slurm's recipes)."""
    doc = {
        "name": "hostile",
        "model": {"path": "hf:meta-llama/Llama-3.1-8B", "container": "lmsysorg/sglang:v0.5.23"},
        "resources": {"gpu_type": "h100", "gpus_per_node": 8, "prefill_nodes": 1, "decode_nodes": 1, "prefill_workers": 1, "decode_workers": 1, **resources},
        "backend": {"type": "sglang", "sglang_config": {"prefill": {"disaggregation-transfer-backend": "nixl"}, "decode": {"disaggregation-transfer-backend": "nixl"}}},
    }
    if sweep is not None:
        doc["sweep"] = sweep
    doc.update(extra or {})
    return doc


def write_json_yaml(path: Path, doc: object) -> Path:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path.write_text(yaml.dump(doc, Dumper=dumper, sort_keys=False, width=1 << 20))
    return path


def lws(size: int, replicas: int) -> dict:
    cmd = ["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B", "--disaggregation-mode", "decode"]
    pod = {"spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.23", "command": cmd}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "big"},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "leaderTemplate": pod, "workerTemplate": pod}}}


def many_containers(n: int, classes: int) -> dict:
    """One Deployment whose pod holds ``n`` SGLang containers in about ``classes`` classes."""
    cs = []
    for i in range(n):
        mode = "prefill" if i % 2 == 0 else "decode"
        cs.append({"name": f"c{i}", "image": "lmsysorg/sglang:v0.5.23", "command": [
            "python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B", "--disaggregation-mode", mode,
            "--disaggregation-transfer-backend", "nixl", "--page-size", str(1 + i % classes), "--port", str(30000 + i)]})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "wide"}, "spec": {"replicas": 1, "template": {"spec": {"containers": cs}}}}


def nested_default(depth: int) -> str:
    """A launch line whose model path is ``${A:-${A:-...}}`` ``depth`` deep."""
    return f"{LAUNCH} --model-path " + "${A:-" * depth + "x" + "}" * depth + " --disaggregation-mode prefill\n"


def million_keys(n: int = 1_000_000) -> str:
    return "".join(f"k{i}: {i}\n" for i in range(n))


# name -> (writer(dir) -> argv, what the issue saw)
def _shadow(d: Path) -> list[str]:
    secret = d.parent / f"{d.name}-outside" / "shadow"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text(f"root:$6$salt$HASH{CANARY}:19000:0:99999:7:::\napi-key: {CANARY}\nwebhook: https://hooks.example.com/{CANARY}\n")
    f = d / "deploy.sh"
    f.write_text(f"{LAUNCH} --model-path meta-llama/Llama-3.1-8B --disaggregation-mode prefill --config {secret}\n"
                 f"{LAUNCH} --model-path meta-llama/Llama-3.1-8B --disaggregation-mode decode --port 30001\n")
    return ["preflight", "-f", str(f), "-o", "json"]


def _shadow_dotdot(d: Path) -> list[str]:
    _shadow(d)
    f = d / "deploy.sh"
    f.write_text(f.read_text().replace(str(d.parent / f"{d.name}-outside" / "shadow"), f"../{d.name}-outside/shadow"))
    return ["preflight", "-f", str(f)]


def _shadow_symlink(d: Path) -> list[str]:
    _shadow(d)
    (d / "cfg.yaml").symlink_to(d.parent / f"{d.name}-outside" / "shadow")
    f = d / "deploy.sh"
    f.write_text(f.read_text().replace(str(d.parent / f"{d.name}-outside" / "shadow"), "cfg.yaml"))
    return ["preflight", "-f", str(f)]


def _shadow_pair(d: Path) -> list[str]:
    _shadow(d)
    p = d / "prefill.sh"
    p.write_text(f"{LAUNCH} --model-path meta-llama/Llama-3.1-8B --disaggregation-mode prefill --config {d.parent / f'{d.name}-outside' / 'shadow'}\n")
    q = d / "decode.sh"
    q.write_text(f"{LAUNCH} --model-path meta-llama/Llama-3.1-8B --disaggregation-mode decode\n")
    return ["preflight", "--prefill", str(p), "--decode", str(q)]


def _model_symlink(d: Path) -> list[str]:
    out = d.parent / f"{d.name}-outside"
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": CANARY}))
    (d / "model").mkdir()
    (d / "model" / "config.json").symlink_to(out / "config.json")
    f = d / "deploy.sh"
    f.write_text(f"{LAUNCH} --model-path model --disaggregation-mode prefill\n{LAUNCH} --model-path model --disaggregation-mode decode --port 30001\n")
    return ["preflight", "-f", str(f), "-o", "json"]


def _recipe(d: Path, **kw) -> Path:
    return write_json_yaml(d / "recipe.yaml", recipe(**kw))


REPRODUCTIONS = {
    "config-outside-root": (_shadow, "--config /etc/shadow in a launch line was read and echoed"),
    "config-dotdot": (_shadow_dotdot, "--config ../x left the root"),
    "config-symlink": (_shadow_symlink, "--config via a symlink out of the root"),
    "config-pair-mode": (_shadow_pair, "--config outside the root in --prefill FILE"),
    "model-config-symlink": (_model_symlink, "model-path/config.json a symlink out of the root"),
    "dev-zero": (lambda d: ["preflight", "-f", "/dev/zero"], "-f /dev/zero reached 11.9 GiB"),
    "dev-urandom": (lambda d: ["preflight", "-f", "/dev/urandom"], "-f /dev/urandom reached 9.1 GiB"),
    "prefill-nodes": (lambda d: ["preflight", "-f", str(_recipe(d, resources={"prefill_nodes": 10**12}))], "prefill_nodes: 10^12: 8.7 GiB"),
    "workers": (lambda d: ["preflight", "-f", str(_recipe(d, resources={"prefill_workers": 10**12, "decode_workers": 10**12}))], "*_workers: 10^12: 4.1 GiB"),
    "gpus-per-worker": (lambda d: ["preflight", "-f", str(_recipe(d, resources={"gpus_per_prefill": 10**12}))], "a worker of 10^12 GPUs spans 10^11 nodes"),
    "sweep-20x2": (lambda d: ["preflight", "-f", str(_recipe(d, resources={}, sweep={f"k{i}": [1, 2] for i in range(20)}))], "sweep of 20 keys x 2 values: past 120 s"),
    "sweep-10x10": (lambda d: ["preflight", "-f", str(_recipe(d, resources={}, sweep={f"k{i}": list(range(10)) for i in range(10)}))], "sweep 10 x 10: past 120 s"),
    "sweep-3000": (lambda d: ["preflight", "-f", str(_recipe(d, resources={}, sweep={"mem": [0.5 + i / 10_000 for i in range(3000)]}))], "one key with 3,000 values: past 60 s"),
    "zip-200k": (lambda d: ["preflight", "-f", str(write_json_yaml(d / "r.yaml", {"base": recipe({}), "zip_override_x": {"resources": {"prefill_workers": list(range(1, 200_001))}}}))], "zip_override over 200k items: 1.56 GiB"),
    "lws-1e9": (lambda d: ["preflight", "-f", str(write_json_yaml(d / "lws.yaml", lws(10**9, 10**9)))], "LWS size and replicas 10^9: past 120 s"),
    "containers-20k": (lambda d: ["preflight", "-f", str(write_json_yaml(d / "wide.yaml", many_containers(20_000, 7_000)))], "20,000 containers in 7,000 classes: past 300 s"),
    "nested-default-100k": (lambda d: ["preflight", "-f", str(_write(d / "n.sh", nested_default(100_000)))], "${A:-${A:-...}} 100k deep: 36 s, 873 MB, RecursionError"),
    "million-keys": (lambda d: ["preflight", "-f", str(_write(d / "m.yaml", "backend: {type: sglang}\n" + million_keys()))], "1M-key YAML: 36 s, 861 MB"),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
