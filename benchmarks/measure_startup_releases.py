"""Start-up agreement, release by release: kvcheck's restatement against each release's own code.

For every SGLang release installed side by side (``.venv/sglang-releases/<X>``, plus the
venv's own release), run the seeded start-up corpus (``tests/startup_corpus.draw`` on four
GPUs, ``draw_sharded_prefill`` on four GPUs, ``tests/startup_worker.draw_plain`` on Hopper)
(and, with ``--hicache`` / ``--hisparse``, ``draw_hicache`` / ``draw_hisparse`` on four GPUs)
through that release's ``prepare_server_args`` -> resolution -> ``check_server_args`` in its
own process (``tests/startup_worker.py``) and through ``kvcheck.sglang.startup.first_outcome``
for a side on that release, and print the per-release table: start-ups compared, agreements,
``unchecked`` (a ``Stop``: kvcheck says it cannot decide), and disagreements by kind
(the runtime starts where kvcheck refuses; the runtime refuses where kvcheck predicts a start;
both refuse with different texts).

Run by hand (it is not a test; a few minutes per release on 2 busy cores)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/measure_startup_releases.py --draws 100 --plain 60 --sharded 20
    ... --releases 0.5.8 0.5.17 --steps-only   # the restated steps without the release gate
    ... --json out.json                        # every disagreement and stop reason

The table is what ``notes``/the issue report as the per-release start-up agreement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kvcheck.sglang.releases import release_key  # noqa: E402


def releases_dir() -> Path:
    return Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))


def installed() -> list[str]:
    root = releases_dir()
    out = [p.name for p in root.iterdir() if (p / "sglang" / "__init__.py").exists()] if root.is_dir() else []
    try:
        from importlib.metadata import version

        out.append(version("sglang"))
    except Exception:  # noqa: BLE001
        pass
    return sorted(set(out), key=release_key)


def run_release(release: str, draws: int, plain: int, sharded: int, seed: int, steps_only: bool, tmp: Path,
                hicache: int = 0, hisparse: int = 0) -> dict:
    root = releases_dir()
    env = dict(os.environ)
    path = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")]
    if (root / release / "sglang" / "__init__.py").exists():
        path = [str(root / release), str(root / "_deps")] + path
    env["PYTHONPATH"] = os.pathsep.join(path)
    cmd = [sys.executable, str(REPO / "tests" / "startup_worker.py"), "--release", release, "--draws", str(draws),
           "--plain-draws", str(plain), "--sharded-draws", str(sharded), "--seed", str(seed), "--tmp", str(tmp / release),
           "--hicache-draws", str(hicache), "--hisparse-draws", str(hisparse)]
    if steps_only:
        cmd.append("--steps-only")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"release": release, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kind(disagreement: str) -> str:
    text = disagreement.split(": ", 1)[-1]
    if text.startswith("runtime starts"):
        return "false-refusal"
    if text.endswith("kvcheck predicts a start"):
        return "missed-refusal"
    return "other-refusal"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--releases", nargs="*", help="default: every installed release")
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--plain", type=int, default=60)
    ap.add_argument("--sharded", type=int, default=20)
    ap.add_argument("--hicache", type=int, default=0, help="HiCache draws (startup_worker.draw_hicache), on four GPUs")
    ap.add_argument("--hisparse", type=int, default=0, help="HiSparse draws (startup_worker.draw_hisparse), on four GPUs")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps-only", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    releases = a.releases or installed()
    tmp = Path(tempfile.mkdtemp(prefix="kvcheck-startup-"))
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(lambda r: run_release(r, a.draws, a.plain, a.sharded, a.seed, a.steps_only, tmp, a.hicache, a.hisparse), releases))
    print("| release | start-ups compared | agree | of which unchecked | disagree | false refusal | missed refusal | other refusal | parser refused | s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['release']} | error: {r['error'][-200:]!r} |")
            continue
        kinds = {"false-refusal": 0, "missed-refusal": 0, "other-refusal": 0}
        for d in r["disagreements"]:
            kinds[kind(d)] += 1
        agree = r["compared"] - r["n_disagreements"]
        print(f"| {r['release']} | {r['compared']} | {agree} | {r['stops']} | {r['n_disagreements']} | {kinds['false-refusal']} | "
              f"{kinds['missed-refusal']} | {kinds['other-refusal']} | {r['parser_refused']} | {r['seconds']} |")
    for r in results:
        for reason, n in sorted(r.get("stop_reasons", {}).items(), key=lambda kv: -kv[1]):
            print(f"  {r['release']} unchecked x{n}: {reason}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0 if all("error" not in r and r["n_disagreements"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
