"""What a 50 MiB hostile deployment file costs kvcheck: wall time, CPU and peak RSS of a
fresh ``kvcheck preflight -f FILE`` per shape, next to a small valid deployment in the
same run (the ratio is the figure; absolute times depend on the machine's load).

Shapes (each written to ~50 MiB, kvcheck's deployment-file limit, unless noted):
one long line, many short launch lines, a 1M-key YAML mapping, deep flow nesting,
a ``${A:-${A:-...}}`` chain, a long sweep list, a long zip_override list, many small
Kubernetes documents, binary noise, and the fan-out reproductions of issue 17 (small
files that stand for huge deployments). The promise (SECURITY.md): every shape ends
within a few seconds and under 1 GiB, exit 2 (or the verdict) and never a traceback.

    python benchmarks/bench_hostile.py [--mib 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hostile_inputs import REPRODUCTIONS, LAUNCH, write_json_yaml, recipe  # noqa: E402
from measure import run_measured  # noqa: E402


def shapes(d: Path, mib: int) -> dict[str, Path]:
    size = mib * 1024 * 1024
    out: dict[str, Path] = {}

    def w(name: str, text: str | bytes) -> None:
        p = d / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        out[name] = p

    w("valid.sh", f"{LAUNCH} --model-path meta-llama/Llama-3.1-8B --disaggregation-mode prefill --disaggregation-transfer-backend nixl\n"
                  f"{LAUNCH} --model-path meta-llama/Llama-3.1-8B --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001\n")
    w("one-long-line.sh", f"{LAUNCH} --model-path " + "a" * (size - 100) + "\n")
    line = f"{LAUNCH} --model-path m --disaggregation-mode prefill --page-size 16\n"
    w("many-launch-lines.sh", line * (size // len(line)))
    w("comment-lines.sh", "# x\n" * (size // 4))
    keys = "".join(f"k{i}: {i}\n" for i in range(size // 12))
    w("million-keys.yaml", "backend: {type: sglang}\n" + keys[: size])
    w("deep-flow.yaml", "a: " + "[" * (size // 2 - 4) + "]" * (size // 2 - 4))
    w("nested-default.sh", f"{LAUNCH} --model-path " + "${A:-" * (size // 8) + "x" + "}" * (size // 8) + "\n")
    w("dollar-noise.sh", f"{LAUNCH} --model-path " + "$A$B${C}" * (size // 8) + "\n")
    w("binary.bin", os.urandom(size))
    doc = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n"
    w("many-documents.yaml", doc * (size // len(doc)))
    out["sweep-long.yaml"] = write_json_yaml(d / "sweep-long.yaml", recipe({}, sweep={"mem": list(range(size // 16))}))
    out["zip-long.yaml"] = write_json_yaml(d / "zip-long.yaml", {"base": recipe({}), "zip_override_x": {"resources": {"prefill_workers": list(range(1, size // 16))}}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = shapes(d, a.mib)
        runs = [(name, ["preflight", "-f", str(p)], p.stat().st_size) for name, p in files.items()]
        for name, (writer, _what) in REPRODUCTIONS.items():
            sub = d / name
            sub.mkdir()
            argv = writer(sub)
            fpath = next((x for x in argv if x.startswith(str(sub))), None)
            runs.append((f"repro:{name}", argv, Path(fpath).stat().st_size if fpath else 0))
        for name, argv, size in runs:
            t0 = time.process_time()
            proc, took, rss = run_measured(*argv, timeout=120)
            tb = "Traceback" in proc.stderr
            rows.append({"shape": name, "bytes": size, "exit": proc.returncode, "wall_s": round(took, 2), "peak_mb": round(rss, 1), "traceback": tb,
                         "message": proc.stderr.strip().splitlines()[-1][:160] if proc.stderr.strip() else ""})
            _ = t0
    base = next(r for r in rows if r["shape"] == "valid.sh")
    for r in rows:
        r["wall_vs_valid"] = round(r["wall_s"] / base["wall_s"], 2) if base["wall_s"] else None
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'shape':32} {'MiB':>6} {'exit':>4} {'wall s':>7} {'x valid':>7} {'peak MB':>8}  message")
        for r in rows:
            print(f"{r['shape']:32} {r['bytes'] / 2**20:6.1f} {r['exit']:4} {r['wall_s']:7.2f} {r['wall_vs_valid']:7.2f} {r['peak_mb']:8.1f}  {r['message'][:90]}")
    worst = max(rows, key=lambda r: r["peak_mb"] if r["peak_mb"] == r["peak_mb"] else 0)
    bad = [r for r in rows if r["traceback"] or r["peak_mb"] >= 1024 or r["wall_s"] > 30]
    print(f"\nworst peak: {worst['shape']} {worst['peak_mb']} MB; over budget: {[r['shape'] for r in bad]}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
