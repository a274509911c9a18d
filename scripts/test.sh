#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup-test-env.sh), then run the suite and
# the handed cases. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-env.sh
export PYTHONUNBUFFERED=1
.venv/bin/python -m pytest "$@"
