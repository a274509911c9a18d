"""A deployment of 1,000 prefill and 1,000 decode instances in 10 distinct classes,
checked against a single-pair preflight in the same run.

Two measurements, both printed:

1. in-process: ``kvcheck.cluster.check_deployments`` on 2,000 ``Instance`` objects (5
   prefill classes x 5 decode classes: TP size, page size and KV dtype vary, so 25
   pairs) vs one ``load_side`` x 2 + ``run_preflight`` of the bundled aligned pair. Best
   of N runs each (the machine is shared; the best run is the least disturbed);
2. cold command line (when the deployment readers are installed): ``kvcheck preflight
   -f`` on the same deployment written as one multi-document Kubernetes manifest vs
   ``kvcheck preflight --prefill --decode`` on the aligned pair, median of N processes.

Goal (issue 8): the cluster check under 2 s and under 5x a single pair.

Usage: python benchmarks/bench_cluster.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODEL = "meta-llama/Meta-Llama-3.1-8B"  # from kvcheck's catalog
PREFILL_CLASSES = [("2", "16", "auto"), ("4", "16", "auto"), ("8", "16", "auto"), ("2", "16", "fp8_e4m3"), ("4", "16", "fp8_e4m3")]
DECODE_CLASSES = [("2", "16", "auto"), ("4", "16", "auto"), ("8", "16", "auto"), ("2", "16", "fp8_e4m3"), ("2", "32", "auto")]
N_EACH = 1000


def argv(role: str, tp: str, page: str, kv: str) -> list[str]:
    return ["--model-path", MODEL, "--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl",
            "--tp-size", tp, "--page-size", page, "--kv-cache-dtype", kv]


def deployment():
    from kvcheck.sources.deployments.instance import Deployment, Instance, Location

    insts = []
    for role, classes in (("prefill", PREFILL_CLASSES), ("decode", DECODE_CLASSES)):
        for i in range(N_EACH):
            c = classes[i % len(classes)]
            insts.append(Instance(role=role, name=f"{role}-{i}", location=Location("bench.yaml", 1 + i), argv=argv(role, *c),
                                  image="lmsysorg/sglang:v0.5.23-cu129", gpus=int(c[0]), gpu_type="h100"))
    return Deployment(name="bench", source=Location("bench.yaml"), instances=insts)


def best(fn, runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def in_process(runs: int) -> dict:
    from kvcheck.cluster import check_deployments
    from kvcheck.preflight import run_preflight
    from kvcheck.sources import load_side

    pair = REPO / "configs" / "aligned"

    def single():
        p = load_side(str(pair / "prefill.yaml"), "prefill")
        d = load_side(str(pair / "decode.yaml"), "decode")
        return run_preflight(p, d)

    dep = deployment()
    result = {}

    def cluster():
        result["r"] = check_deployments([dep])

    single(), cluster()  # warm imports and the flag table once for both
    t_single, t_cluster = best(single, runs), best(cluster, runs)
    d = result["r"].deployments[0]
    return {"instances": len(d.instances), "classes": len(d.classes), "pairs": len(d.pairs), "verdicts": sorted({p.verdict for p in d.pairs}),
            "single_pair_s": t_single, "cluster_s": t_cluster, "ratio": t_cluster / t_single}


def manifest(path: Path) -> None:
    docs = []
    for role, classes in (("prefill", PREFILL_CLASSES), ("decode", DECODE_CLASSES)):
        for i in range(N_EACH):
            args = "\n".join(f"            - {a!r}" for a in argv(role, *classes[i % len(classes)]))
            docs.append(f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: {role}-{i}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {role}-{i}}}}}
  template:
    metadata: {{labels: {{app: {role}-{i}}}}}
    spec:
      containers:
        - name: sglang
          image: lmsysorg/sglang:v0.5.23-cu129
          command: [python3, -m, sglang.launch_server]
          args:
{args}
""")
    path.write_text("---\n".join(docs))


def cold(runs: int) -> dict | None:
    try:
        from kvcheck.sources.deployments import read_deployments  # noqa: F401
    except ImportError:
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pair = REPO / "configs" / "aligned"
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "bench.yaml"
        manifest(big)
        single = [sys.executable, "-m", "kvcheck", "preflight", "--prefill", str(pair / "prefill.yaml"), "--decode", str(pair / "decode.yaml"), "-o", "json"]
        cluster = [sys.executable, "-m", "kvcheck", "preflight", "-f", str(big), "-o", "json"]

        def run(cmd):
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            if p.returncode not in (0, 1):
                raise SystemExit(f"{' '.join(cmd[3:5])} exited {p.returncode}: {p.stderr[-300:]}")
            return time.perf_counter() - t

        run(single), run(cluster)
        s, c = [], []
        for _ in range(runs):
            s.append(run(single))
            c.append(run(cluster))
        return {"manifest_bytes": big.stat().st_size, "single_pair_s": statistics.median(s), "cluster_s": statistics.median(c),
                "ratio": statistics.median(c) / statistics.median(s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    figures = {"in_process": in_process(args.runs), "cold_cli": cold(max(1, args.runs // 2))}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    ip = figures["in_process"]
    print(f"in-process: {ip['instances']} instances -> {ip['classes']} classes -> {ip['pairs']} pairs ({', '.join(ip['verdicts'])})")
    print(f"  single pair {ip['single_pair_s'] * 1000:.1f} ms, cluster {ip['cluster_s'] * 1000:.1f} ms, ratio {ip['ratio']:.2f}x (goal: < 2 s and < 5x)")
    cc = figures["cold_cli"]
    if cc is None:
        print("cold CLI: skipped (no deployment readers in this build)")
    else:
        print(f"cold CLI: single pair {cc['single_pair_s'] * 1000:.0f} ms, preflight -f on a {cc['manifest_bytes'] / 1e6:.1f} MB manifest {cc['cluster_s'] * 1000:.0f} ms, ratio {cc['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
