"""kvcheck fabric: wall time of the matrix for 8 and 16 namespaced nodes vs one pair's probe.

Run (as root): python benchmarks/bench_fabric.py [--pages 4] [--repeat 1]

In one run, on one bridge of network namespaces (``tests/fabric_lab.py``), UCX over TCP:
- one pair: a 1 prefill x 1 decode deployment (1 round);
- 8 nodes: 4 prefill x 4 decode (16 required pairs, 4 rounds);
- 16 nodes: 8 prefill x 8 decode (64 required pairs, 8 rounds).
Each is a full ``run_fabric`` (join, first pass, no retests: ``retests=0``, so the matrix
itself is measured). Printed: join seconds, probe seconds (the rounds), and the probe
time over one pair's, next to the rounds ratio and the pairs ratio. Goal: the matrix
costs about the rounds, not the pairs (probe ratio near the rounds ratio).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fabric_lab import Lab, lab_unavailable  # noqa: E402


def _deployment(tmp: Path, prefill: int, decode: int) -> str:
    import yaml

    cfg = json.loads((REPO / "configs/models/llama-3.1-8b/config.json").read_text())
    cfg["num_hidden_layers"] = 4
    (tmp / "m").mkdir(exist_ok=True)
    (tmp / "m" / "config.json").write_text(json.dumps(cfg))
    docs = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"b-{role}"},
             "spec": {"replicas": n, "template": {"spec": {"containers": [{
                 "name": "sglang", "image": "lmsysorg/sglang:v0.5.23-cu129", "command": ["python3", "-m", "sglang.launch_server"],
                 "args": [f"--model-path={tmp / 'm'}", f"--disaggregation-mode={role}", "--disaggregation-transfer-backend=nixl", "--tp-size=1", "--page-size=16"],
                 "env": [{"name": "UCX_TLS", "value": "tcp"}, {"name": "UCX_NET_DEVICES", "value": "eth0"}]}]}}}}
            for role, n in (("prefill", prefill), ("decode", decode))]
    path = tmp / f"b-{prefill}x{decode}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def one(lab, etcd_url: str, tmp: Path, prefill: int, decode: int, pages: int) -> dict:
    from kvcheck.fabric.coordinator import FabricOptions, run_fabric
    from kvcheck.fabric.launch import Launcher
    from kvcheck.fabric.topology import build_plan
    from kvcheck.sources.deployments import read_deployments

    plan = build_plan(read_deployments([_deployment(tmp, prefill, decode)]), pages=pages, timeout=5.0)
    names = plan.prefill_nodes + plan.decode_nodes
    hosts = {n: {"prefix": lab.prefix(i), "listen_host": lab.ips[i], "env": {}} for i, n in enumerate(names)}
    result = run_fabric(plan, FabricOptions(etcd=etcd_url, join_timeout=120, retests=0, deadline=900), Launcher(hosts))
    probe_s = sum(r["seconds"] for r in result.rounds)
    ok = sum(1 for r in result.pairs.values() if r.status == "ok")
    return {"nodes": len(names), "pairs": len(plan.pairs), "rounds": len(plan.rounds), "ok_pairs": ok, "join_s": result.join_seconds, "probe_s": probe_s,
            "total_s": result.seconds, "round_s": [round(r["seconds"], 3) for r in result.rounds]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    why = lab_unavailable()
    if why:
        sys.exit(f"bench_fabric: network namespaces: {why}")
    from kvcheck.fabric.launch import SmallEtcd
    from tests.nixl_helpers import free_port

    lab = Lab(16)
    try:
        etcd = SmallEtcd(lab.gateway, free_port())
        try:
            with tempfile.TemporaryDirectory() as d:
                rows = []
                for _ in range(a.repeat):
                    base = one(lab, etcd.url, Path(d), 1, 1, a.pages)
                    rows.append(("1 pair", base, base))
                    for p in (4, 8):
                        rows.append((f"{2 * p} nodes", one(lab, etcd.url, Path(d), p, p, a.pages), base))
        finally:
            etcd.close()
    finally:
        lab.close()
    print(f"{'case':>9} {'nodes':>5} {'pairs':>5} {'rounds':>6} {'ok':>3} {'join s':>7} {'probe s':>8} {'probe/1pair':>11} {'rounds ratio':>12} {'pairs ratio':>11}")
    for name, r, base in rows:
        print(f"{name:>9} {r['nodes']:>5} {r['pairs']:>5} {r['rounds']:>6} {r['ok_pairs']:>3} {r['join_s']:>7.2f} {r['probe_s']:>8.2f} "
              f"{r['probe_s'] / base['probe_s']:>11.2f} {r['rounds'] / base['rounds']:>12.0f} {r['pairs'] / base['pairs']:>11.0f}")
    print(json.dumps([{"case": n, **r} for n, r, _ in rows]))


if __name__ == "__main__":
    main()
