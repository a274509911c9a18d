#!/usr/bin/env bash
# Lint, format check and type check of kvcheck/ (settings: [tool.ruff] and [tool.mypy] in
# pyproject.toml): `ruff format --check`, `ruff check` and `mypy`. All three run; the exit
# status is 0 only when all three are clean, 1 otherwise. Needs .venv (scripts/setup-test-env.sh:
# ruff and mypy are in the .[test] extra).
#   bash scripts/lint.sh          check
#   bash scripts/lint.sh --fix    rewrite, then check: `ruff format`, the strings ruff cannot
#                                 split (scripts/wrap_long_strings.py), `ruff format` again,
#                                 `ruff check --fix` (safe fixes only)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${KVCHECK_LINT_BIN:-.venv/bin}
TARGET=(kvcheck/)
if [ "${1:-}" = "--fix" ]; then
  "$BIN/ruff" format -q "${TARGET[@]}"
  "$BIN/python" scripts/wrap_long_strings.py "${TARGET[@]}"
  "$BIN/ruff" format "${TARGET[@]}"
  "$BIN/ruff" check --fix -q "${TARGET[@]}" || true
fi
rc=0
echo "== ruff format --check ${TARGET[*]}"
"$BIN/ruff" format --check "${TARGET[@]}" || rc=1
echo "== ruff check ${TARGET[*]}"
"$BIN/ruff" check "${TARGET[@]}" || rc=1
echo "== mypy ${TARGET[*]}"
"$BIN/mypy" "${TARGET[@]}" || rc=1
if [ "$rc" = 0 ]; then echo "lint: clean"; else echo "lint: not clean (see above)"; fi
exit "$rc"
