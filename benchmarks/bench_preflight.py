"""Cold ``kvcheck preflight``: CPU over a bare interpreter, this tree against a baseline (issue 15).

One command times, in fresh processes and interleaved run by run (the order rotates, so
machine drift hits every variant alike):

* ``bare``: ``python -c pass`` (the interpreter alone);
* ``pair``: ``kvcheck preflight --prefill configs/aligned/prefill.yaml --decode
  configs/aligned/decode.yaml -o json`` (the static pair: no release pinned, no GPU given, so
  the pair is decided over the whole release window on Hopper and Blackwell);
* ``file``: ``kvcheck preflight -f configs/deployments/llama-nixl-1p2d.yaml -o json`` (a small
  deployment: one prefill and two decodes);
* ``pair@base`` and ``file@base``: the same two commands on a baseline revision (``--base
  REV``, default the commit this work started from), exported with ``git archive`` and run
  with its own ``PYTHONPATH``.

Every run is ``python -P`` (the working directory, the repository root, is not on
``sys.path``; each variant imports kvcheck from its own tree, which is checked), with
bytecode caches written once and then read (``PYTHONPYCACHEPREFIX`` in a temporary folder,
as an installed package has them: without them every run compiles ~200 modules and
measures the compiler). CPU = user + system time of the process (``wait4``); on a shared
2-core machine the wall time mostly measures waiting for a core, so the CPU figures decide.

Reported per variant: median CPU, quartiles, min/max, the median over bare; goals (issue
15): pair <= 0.10 s and file <= 0.15 s of CPU over bare. Also: the variants' verdict and
exit status (they must agree with the baseline), and whether the static pair imported
torch, nixl, sglang, rich, httpx or typer (it must not: a plain command line is read
without typer). And where this tree's CPU goes, as
more variants in the same interleaved runs: ``typer`` (``import typer``), ``pydantic``
(one ``BaseModel`` subclass built and validated: pydantic's import and first schema),
``typer+pydantic``, and ``pair-imports`` / ``file-imports`` (every kvcheck module the
command imported, imported alone: the cost of the imports without the run).

Usage: python benchmarks/bench_preflight.py [--runs N] [--base REV|''] [--json]
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The commit issue 15's speed work started from ("main" before it).
DEFAULT_BASE = "69863e6"
PAIR = ["--prefill", "configs/aligned/prefill.yaml", "--decode", "configs/aligned/decode.yaml", "-o", "json"]
FILE = ["-f", "configs/deployments/llama-nixl-1p2d.yaml", "-o", "json"]
GOALS = {"pair": 0.10, "file": 0.15}
HEAVY = ("torch", "nixl", "nixl_cu12", "sglang", "rich", "httpx", "typer")


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Run ``cmd`` from the repository root: (CPU seconds, exit status, stdout)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), out.decode()


def spread(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4)
    return {
        "median": round(statistics.median(xs), 4),
        "q1": round(q[0], 4),
        "q3": round(q[2], 4),
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
    }


def base_tree(rev: str, dest: Path) -> str:
    """``git archive REV kvcheck`` into ``dest``; returns the short commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(["git", "archive", commit, "kvcheck"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def loaded_modules(env: dict[str, str], args: list[str]) -> list[str]:
    """Every module ``kvcheck preflight ARGS`` has imported when it ends (run in process)."""
    code = (
        f"import sys\nsys.argv = ['kvcheck', 'preflight', *{args!r}]\n"
        "import kvcheck.cli as c\n"
        "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('LOADED ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    line = next((x for x in proc.stderr.splitlines() if x.startswith("LOADED")), "LOADED")
    return line.split()[1:]


# Where a cold run's CPU goes (this tree only): the CLI framework and the model library
# alone, and every module the run imports without running anything.
PARTS = {
    "typer": "import typer",
    "pydantic": "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int = 1\nA(x=2)",
    "typer+pydantic": "import typer\nfrom pydantic import BaseModel\nclass A(BaseModel):\n    x: int = 1\nA(x=2)",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--base", default=DEFAULT_BASE, help="git revision of the baseline ('' to skip)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kvcheck-bench-preflight-"))
    try:
        roots = {"": REPO}
        base_commit = None
        if args.base:
            (tmp / "base").mkdir()
            base_commit = base_tree(args.base, tmp / "base")
            roots["@base"] = tmp / "base"
        envs: dict[str, dict[str, str]] = {}
        for tag, root in roots.items():
            env = dict(os.environ)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(tmp / ("pyc" + tag.replace("@", "-")))
            env["PYTHONPATH"] = str(root)
            env.pop("KVCHECK_API_KEY", None)
            where = subprocess.run(
                [sys.executable, "-P", "-c", "import kvcheck; print(kvcheck.__file__)"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
            ).stdout.strip()
            if not where.startswith(str(root)):
                print(f"variant {tag or 'this tree'} imports kvcheck from {where}, not {root}", file=sys.stderr)
                return 2
            envs[tag] = env
        kv = [sys.executable, "-P", "-m", "kvcheck", "preflight"]
        variants: dict[str, tuple[list[str], dict[str, str]]] = {"bare": ([sys.executable, "-c", "pass"], envs[""])}
        for tag in roots:
            variants["pair" + tag] = (kv + PAIR, envs[tag])
            variants["file" + tag] = (kv + FILE, envs[tag])
        parts = dict(PARTS)
        loaded = {k: loaded_modules(envs[""], a) for k, a in (("pair", PAIR), ("file", FILE))}
        for k, mods in loaded.items():
            # kvcheck's own modules bring every library the run uses (typer, pydantic, yaml...)
            own = sorted(m for m in mods if m.startswith("kvcheck.") and m != "kvcheck.__main__")
            parts[f"{k}-imports"] = "import " + ", ".join(own + [m for m in ("yaml",) if m in mods])
        for name, code in parts.items():
            variants[name] = ([sys.executable, "-P", "-c", code], envs[""])
        answers: dict[str, tuple[int, str | None]] = {}
        for name, (cmd, env) in variants.items():  # write the bytecode caches, warm the file cache
            for _ in range(2):
                _, rc, out = timed(cmd, env)
            verdict = None
            if name in ("pair", "file") or name.endswith("@base"):
                try:
                    verdict = json.loads(out).get("verdict")
                except ValueError:
                    print(f"{name}: no JSON on stdout (exit {rc})", file=sys.stderr)
                    return 2
            answers[name] = (rc, verdict)
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for i in range(args.runs):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                cmd, env = variants[name]
                cpu[name].append(timed(cmd, env)[0])
        med = {k: statistics.median(v) for k, v in cpu.items()}
        q = {k: statistics.quantiles(v, n=4) for k, v in cpu.items()}
        over = {
            k: {
                "median": round(med[k] - med["bare"], 4),
                "q1": round(q[k][0] - med["bare"], 4),
                "q3": round(q[k][2] - med["bare"], 4),
            }
            for k in variants
            if k != "bare"
        }
        fig = {
            "runs": args.runs,
            "python": sys.version.split()[0],
            "base_commit": base_commit,
            "cpu_s": {k: spread(v) for k, v in cpu.items()},
            "cpu_over_bare_s": over,
            "goals_over_bare_s": GOALS,
            "goal_met": {k: over[k]["median"] <= GOALS[k] for k in GOALS},
            "ratio_to_base_over_bare": {
                k: round(over[k]["median"] / over[k + "@base"]["median"], 3) for k in GOALS if k + "@base" in over
            },
            "parts_over_bare_s": {k: over[k]["median"] for k in parts},
            "exit_and_verdict": {k: list(v) for k, v in answers.items() if v[1] is not None},
            "same_answer_as_base": {k: answers[k] == answers[k + "@base"] for k in GOALS if k + "@base" in answers},
            "heavy_modules_imported_by_pair": sorted(m for m in HEAVY if m in loaded["pair"]),
            "modules_imported": {k: len(v) for k, v in loaded.items()},
        }
        if args.json:
            print(json.dumps(fig, indent=2))
        else:
            print(f"{'variant':15} {'CPU median':>10} {'q1':>7} {'q3':>7} {'over bare':>10}  exit verdict")
            for k, s in fig["cpu_s"].items():
                extra = f"{over[k]['median']:10.4f}  {answers[k][0]} {answers[k][1] or ''}" if k in over else ""
                print(f"{k:15} {s['median']:10.4f} {s['q1']:7.4f} {s['q3']:7.4f} {extra}")
            shown = ("goals_over_bare_s", "goal_met", "ratio_to_base_over_bare", "same_answer_as_base")
            for k in (*shown, "parts_over_bare_s", "modules_imported"):
                print(f"{k}: {fig[k]}")
            print(f"heavy modules imported by the static pair: {fig['heavy_modules_imported_by_pair'] or 'none'}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
