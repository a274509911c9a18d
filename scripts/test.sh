#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup-test-env.sh), then run the suite and
# the handed cases. Extra arguments go to pytest (after ours: `-n 0` runs in one process).
#
# Byte-code: the suite starts a few hundred Python processes (kvcheck's CLI, each SGLang
# release's own code in a worker of its own) that import torch, transformers and SGLang.
# Without byte-code each of them compiles those modules again (PYTHONDONTWRITEBYTECODE is
# set in many container images, and setup-test-env.sh installs with --no-compile), which
# was over a third of the suite's CPU time. Byte-code is written once, on first import,
# under .pycache/ (PYTHONPYCACHEPREFIX: nothing is written beside the sources, in .venv or
# in the sglang-releases folders) and read by every later process.
#
# Workers: pytest-xdist (the .[test] extra), KVCHECK_TEST_WORKERS processes (default 2, the
# CI machine's cores), one test file per worker at a time (--dist loadfile: a file's module
# fixtures, e.g. the per-release conformance runs, are computed once), the costliest files
# first (tests/conftest.py, HEAVY_FIRST).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-env.sh
export PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.pycache}"
WORKERS=${KVCHECK_TEST_WORKERS:-2}
.venv/bin/python -m pytest -n "$WORKERS" --dist loadfile --no-loadscope-reorder "$@"
