"""Record the launch lines of SGLang's own PD tests, release by release.

``tests/data/sglang_pd_tests.yaml`` restates how each SGLang PD test class launches its two
servers; ``tests/sglang_pd_tests_worker.py`` runs one release's own test base class (as
SGLang's CI does) and parses both argvs with that release's ``ServerArgs``. This script
runs the worker once per release and writes what it built to
``tests/data/sglang_pd_tests_recorded.json``, so the suite checks every release cheaply
(``tests/test_mooncake_sglang_pd_tests.py`` reads the recording and runs kvcheck on it;
it re-records only the installed release live, to prove the recording still matches).

A release is read from, in order: the test venv itself (the installed SGLang), the
releases ``scripts/setup-test-env.sh`` installs side by side (``.venv/sglang-releases/X``),
or a cache (``--cache``, default ``~/.cache/kvcheck/sglang-releases``) that this script
fills with ``pip install --no-deps --target`` (SGLang's wheel, no dependencies; what the
base classes import beyond kvcheck's environment comes from ``.venv/sglang-releases/_deps``).

Usage::

    python scripts/record_sglang_pd_tests.py            # every release in RELEASES
    python scripts/record_sglang_pd_tests.py 0.5.9 0.5.23

It takes about 20 s of CPU per release (importing the release's SGLang).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "tests" / "data" / "sglang_pd_tests.yaml"
WORKER = REPO / "tests" / "sglang_pd_tests_worker.py"
OUT = REPO / "tests" / "data" / "sglang_pd_tests_recorded.json"
SIDE_BY_SIDE = REPO / ".venv" / "sglang-releases"

# Every SGLang release kvcheck models (0.5.5 .. 0.5.23), the post releases where the PD
# path changed (kvcheck.sglang.pd_release: 0.5.6.post1's PP assert, 0.5.12.post1's
# completion path) included.
RELEASES = (
    "0.5.5", "0.5.6", "0.5.6.post1", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12",
    "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
    "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)  # fmt: skip


# Keys of a test entry the worker does not read (what kvcheck is expected to say, where the
# test comes from, the CI runner's GPU): editing them leaves the recording current.
NOT_RECORDED = ("source", "gpu", "expect", "skip_in_ci")


def inputs_digest() -> str:
    """sha256 over what the worker reads (each test entry less ``NOT_RECORDED``) and the
    worker itself: a recording made from other inputs is stale."""
    import yaml

    tests = [{k: v for k, v in t.items() if k not in NOT_RECORDED} for t in yaml.safe_load(SPEC.read_text())["tests"]]
    h = hashlib.sha256(json.dumps(tests, sort_keys=True).encode())
    h.update(WORKER.read_bytes())
    return h.hexdigest()


def installed_release() -> str | None:
    """The SGLang version installed in this interpreter's environment (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def release_path(release: str, cache: Path) -> list[str] | None:
    """PYTHONPATH entries that make ``import sglang`` load ``release`` (``None``: the
    interpreter's own SGLang is that release); installs it into ``cache`` when missing."""
    if release == installed_release():
        return None
    for root in (SIDE_BY_SIDE / release, cache / release):
        if (root / "sglang" / "__init__.py").is_file():
            return [str(root), str(SIDE_BY_SIDE / "_deps")]
    target = cache / release
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", "--no-deps",
         "--target", str(target), f"sglang=={release}"],
        check=True, timeout=900,
    )  # fmt: skip
    return [str(target), str(SIDE_BY_SIDE / "_deps")]


def run_worker(release: str, tests: list[dict], cache: Path) -> list[dict]:
    """The worker's records for ``release`` (one per test of the data)."""
    stubs = [str(REPO / "tests" / "stubs_pd"), str(REPO / "tests" / "stubs")]
    extra = release_path(release, cache)
    path = [*(extra or []), *stubs, str(REPO)]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tests.json"
        src.write_text(json.dumps(tests))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        proc = subprocess.run([sys.executable, str(WORKER), str(src)], capture_output=True, text=True, env=env,
                              timeout=600, cwd=tmp)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"worker failed on SGLang {release}:\n{proc.stderr[-3000:]}")
    recs = json.loads(proc.stdout.strip().splitlines()[-1])
    got = {r.get("release") for r in recs}
    if got != {release}:
        raise SystemExit(f"asked for SGLang {release}, the worker imported {sorted(map(str, got))}")
    return recs


def compact(by_release: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Per test, each distinct record once with the releases that built it (most records are
    the same across releases): ``{name: [{"releases": [...], "applies": ..., ...}]}``."""
    out: dict[str, list[dict]] = {}
    for release, recs in by_release.items():
        for r in recs:
            body = {k: v for k, v in r.items() if k not in ("name", "release")}
            variants = out.setdefault(r["name"], [])
            for v in variants:
                if {k: x for k, x in v.items() if k != "releases"} == body:
                    v["releases"].append(release)
                    break
            else:
                variants.append({"releases": [release], **body})
    return out


def expand(data: dict) -> dict[str, list[dict]]:
    """The recording's records per release, in the data's test order (``compact`` undone)."""
    by_release: dict[str, list[dict]] = {r: [] for r in data["releases"]}
    for name, variants in data["tests"].items():
        for v in variants:
            body = {k: x for k, x in v.items() if k != "releases"}
            for release in v["releases"]:
                by_release[release].append({"name": name, "release": release, **body})
    return by_release


def main() -> None:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("releases", nargs="*", help=f"default: {' '.join(RELEASES)}")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kvcheck" / "sglang-releases")
    args = ap.parse_args()
    tests = yaml.safe_load(SPEC.read_text())["tests"]
    digest = inputs_digest()
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    recorded = expand(old) if old.get("inputs_sha256") == digest else {}
    for release in args.releases or RELEASES:
        recorded[release] = run_worker(release, tests, args.cache)
        applies = sum(r["applies"] for r in recorded[release])
        print(f"SGLang {release}: {applies} of {len(tests)} tests in this release's form", flush=True)
    order = {r: i for i, r in enumerate(RELEASES)}
    releases = sorted(recorded, key=lambda r: order.get(r, len(order)))
    out = {
        "about": "written by scripts/record_sglang_pd_tests.py: per test of tests/data/sglang_pd_tests.yaml, "
        "the argvs each SGLang release's own PD test base class builds, each distinct record once with the "
        "releases that built it (applies false: not in that release's form, with the reason)",
        "inputs_sha256": digest,
        "releases": releases,
        "tests": compact({k: recorded[k] for k in releases}),
    }
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)} ({len(releases)} releases)")


if __name__ == "__main__":
    main()
