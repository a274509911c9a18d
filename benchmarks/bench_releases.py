"""Does the 43-release flag store make the cold static preflight slower? (issue 9)

One command times, in fresh processes and interleaved run by run (so machine drift hits
every variant alike), the same cold ``python -m kvcheck preflight`` on a bundled pair. Both
the wall time and the CPU time (user + system, from ``wait4``) of each process are taken;
the ratios that decide are the CPU ones (on a shared 2-core machine the wall time is mostly
time spent waiting for a core):

* ``store43``: this checkout as it is (every release 0.5.0rc2 .. 0.5.23 in the flag store);
* ``store1``: the same code with a flag store that holds the newest release only (built
  here from the real one: 0.5.23's entries and header, nothing else), i.e. the cost the
  extra 42 releases add to the very same code path;
* ``base`` (``--base REV``, default the commit before the multi-release store landed):
  the project as it was before releases were modeled, exported with ``git archive``.
  This one also differs in every feature added since; it is the "before" of issue 9.

Each variant runs with ``PYTHONPATH`` set to its own tree, ``python -P`` (so the working
directory, the repository root, where the bundled configs are, is not on ``sys.path``) and
a check that it imports kvcheck from its own tree. Reported per variant: the
median CPU and wall time, their spread (min, quartiles, max), the median over a bare interpreter,
and the ratios store43/store1 and store43/base; and, from three ``python -X importtime`` runs
per variant (median per module), the modules whose cumulative import time differs most
between store43 and store1 (at this size, run-to-run noise); and the CPU time of the
first ``FlagTable.load()`` in a fresh process (median of 7), the step the store decides.

Usage: python benchmarks/bench_releases.py [--runs N] [--pair configs/aligned] [--base REV] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The commit before "Releases: multi-release flag store ..." (4eec5e9): one release, 0.5.23.
DEFAULT_BASE = "4eec5e9^"


def single_release_tree(dest: Path) -> str:
    """Copy ``kvcheck/`` to ``dest`` with a flag store holding only the newest release:
    its entries (renumbered, run-length coded as the real store does) and its header."""
    shutil.copytree(REPO / "kvcheck", dest / "kvcheck", ignore=shutil.ignore_patterns("__pycache__"))
    store = dest / "kvcheck" / "sglang" / "flagstore"
    newest = json.loads((store / "index.json").read_text())[-1]
    head = json.loads((store / "r" / f"{newest}.json").read_text())
    lines = (store / "entries.jsonl").read_text().splitlines()
    kept = [lines[i] for start, n in head["runs"] for i in range(start, start + n)]
    head["runs"] = [[0, len(kept)]]
    shutil.rmtree(store / "r")
    (store / "r").mkdir()
    (store / "r" / f"{newest}.json").write_text(json.dumps(head, separators=(",", ":")))
    (store / "entries.jsonl").write_text("\n".join(kept) + "\n")
    (store / "index.json").write_text(json.dumps([newest]))
    return newest


def base_tree(rev: str, dest: Path) -> str:
    """``git archive REV kvcheck`` into ``dest``; returns the commit id."""
    commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit, "kvcheck"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds (user + system) of the process, exit status). On a shared,
    busy machine the wall time mostly measures waiting for a core; the CPU time is what
    the process itself spends, and is the figure the ratios use."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def spread(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4)
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "q1": round(q[0], 4),
            "q3": round(q[2], 4), "max": round(max(xs), 4)}


def import_times(cmd: list[str], env: dict[str, str]) -> dict[str, int]:
    """Cumulative import time (us) per top-level-or-kvcheck module, from -X importtime."""
    proc = subprocess.run([cmd[0], "-X", "importtime"] + cmd[1:], cwd=REPO, env=env, capture_output=True, text=True)
    assert "kvcheck.cli" in proc.stderr, proc.stderr[-2000:]
    out: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line[len("import time:"):].split("|")]
        try:
            cumulative = int(parts[1])
        except ValueError:
            continue
        name = parts[2]
        out[name.strip()] = max(out.get(name.strip(), 0), cumulative)
    return out


TABLE_LOAD = (
    "import time, kvcheck.checks.base\n"
    "from kvcheck.sglang.flags import FlagTable\n"
    "t = time.process_time(); FlagTable.load(); print(time.process_time() - t)\n"
)


def table_load_ms(env: dict[str, str], runs: int = 7) -> float:
    """Median CPU milliseconds of the first ``FlagTable.load()`` (the newest release's
    table) in a fresh process, the part of the cold path the flag store decides."""
    out = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-P", "-c", TABLE_LOAD], cwd=REPO, env=env, capture_output=True, text=True, check=True)
        out.append(float(proc.stdout.strip().splitlines()[-1]) * 1000)
    return round(statistics.median(out), 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--pair", default="configs/aligned")
    ap.add_argument("--base", default=DEFAULT_BASE, help="git revision of the before-releases baseline ('' to skip)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    pair = REPO / args.pair
    # -P: no working directory on sys.path (python -m puts it first, ahead of PYTHONPATH,
    # and the working directory is the repository: every variant would import this tree)
    cmd = [sys.executable, "-P", "-m", "kvcheck", "preflight", "--prefill", str(pair / "prefill.yaml"), "--decode", str(pair / "decode.yaml"), "--format", "json"]
    tmp = Path(tempfile.mkdtemp(prefix="kvcheck-bench-releases-"))
    try:
        variants: dict[str, Path] = {"store43": REPO}
        (tmp / "store1").mkdir()
        newest = single_release_tree(tmp / "store1")
        variants["store1"] = tmp / "store1"
        base_commit = None
        if args.base:
            (tmp / "base").mkdir()
            base_commit = base_tree(args.base, tmp / "base")
            variants["base"] = tmp / "base"
        envs = {}
        for name, root in variants.items():
            env = dict(os.environ)
            env["PYTHONPATH"] = str(root)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            envs[name] = env
        bare = [sys.executable, "-c", "pass"]
        # each variant imports its own tree (PYTHONPATH wins over an editable install)
        for name, root in variants.items():
            where = subprocess.run([sys.executable, "-P", "-c", "import kvcheck; print(kvcheck.__file__)"], cwd=REPO, env=envs[name],
                                   capture_output=True, text=True).stdout.strip()
            if not where.startswith(str(root)):
                print(f"{name}: imports kvcheck from {where}, not {root}", file=sys.stderr)
                return 2
        # bytecode caches written and the file cache warm for every variant, then check
        # that each one runs the pair (exit 0 pass/warn or 1 fail).
        for name in variants:
            for _ in range(2):
                _, _, rc = timed(cmd, envs[name])
            if rc not in (0, 1):
                print(f"{name}: kvcheck exited {rc}", file=sys.stderr)
                return 2
        times: dict[str, list[float]] = {name: [] for name in ["bare", *variants]}
        cpu: dict[str, list[float]] = {name: [] for name in ["bare", *variants]}
        for i in range(args.runs):
            order = list(variants)
            order = order[i % len(order):] + order[: i % len(order)]  # rotate who goes first
            for name in ["bare", *order]:
                w, c, _ = timed(bare if name == "bare" else cmd, envs["store43" if name == "bare" else name])
                times[name].append(w)
                cpu[name].append(c)
        imports = {}
        for name in variants:  # the median of 3 -X importtime runs per module
            runs = [import_times(cmd, envs[name]) for _ in range(3)]
            imports[name] = {m: int(statistics.median(r.get(m, 0) for r in runs)) for m in set().union(*runs)}
        med = {k: statistics.median(v) for k, v in cpu.items()}
        wmed = {k: statistics.median(v) for k, v in times.items()}
        diff = sorted(
            ((m, imports["store43"].get(m, 0) - imports["store1"].get(m, 0)) for m in set(imports["store43"]) | set(imports["store1"])),
            key=lambda t: -abs(t[1]),
        )[:6]
        fig = {
            "runs": args.runs,
            "pair": args.pair,
            "newest_release": newest,
            "base_commit": base_commit,
            "cpu_s": {k: spread(v) for k, v in cpu.items()},
            "wall_s": {k: spread(v) for k, v in times.items()},
            "cpu_over_bare_python_median_s": {k: round(med[k] - med["bare"], 4) for k in variants},
            "cpu_ratio_store43_over_store1": round(med["store43"] / med["store1"], 3),
            "cpu_ratio_store43_over_base": round(med["store43"] / med["base"], 3) if "base" in med else None,
            "cpu_ratio_over_bare_store43_over_store1": round((med["store43"] - med["bare"]) / (med["store1"] - med["bare"]), 3),
            "wall_ratio_store43_over_store1": round(wmed["store43"] / wmed["store1"], 3),
            "wall_ratio_store43_over_base": round(wmed["store43"] / wmed["base"], 3) if "base" in wmed else None,
            "flag_table_load_cpu_ms": {k: table_load_ms(envs[k]) for k in variants},
            "import_time_kvcheck_us": {k: imports[k].get("kvcheck.cli", 0) for k in variants},
            "largest_import_differences_store43_minus_store1_us": dict(diff),
        }
        if args.json:
            print(json.dumps(fig, indent=2))
        else:
            for k, v in fig.items():
                print(f"{k:52} {v}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
