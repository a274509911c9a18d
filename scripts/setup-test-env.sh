#!/usr/bin/env bash
# Set up .venv with everything the test suite uses: kvcheck and its test tools, SGLang
# 0.5.23 (its own decision code, driven on CPU), NIXL (real agents over UCX on
# loopback), and Debian's etcd-server (a real etcd for the NIXL metadata tests).
# Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing etcd-server (Debian)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null \
      || echo "warning: etcd-server could not be installed; the etcd tests will be skipped"
  else
    echo "warning: no etcd binary and no root apt-get; the etcd tests will be skipped"
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
echo "== installing kvcheck and test tools"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e '.[test]'
echo "== installing SGLang 0.5.23 (--no-deps) and what its decision code imports on CPU"
.venv/bin/python -m pip install -q torch==2.13.0 && .venv/bin/python -m pip install -q -r requirements/runtime.txt
.venv/bin/python -m pip install -q --no-deps sglang==0.5.23
echo "== installing NIXL (nixl-cu12, --no-deps)"
.venv/bin/python -m pip install -q -r requirements/nixl.txt
.venv/bin/python -m pip install -q --no-deps nixl-cu12==1.5.1

# Several SGLang releases side by side, each --no-deps in its own folder, for the
# per-release conformance tests (tests/test_conformance_releases.py runs each in its own
# process with PYTHONPATH=.venv/sglang-releases/X). The releases are those whose PD path
# changed (see kvcheck/sglang/pd_release.py); _deps holds what their imports need beyond
# kvcheck's own environment.
RELEASES=${KVCHECK_SGLANG_RELEASES:-"0.5.8 0.5.10 0.5.13 0.5.16 0.5.17 0.5.21 0.5.22"}
echo "== installing SGLang releases side by side: $RELEASES"
mkdir -p .venv/sglang-releases
[ -d .venv/sglang-releases/_deps/openai ] || .venv/bin/python -m pip install -q --no-deps --target .venv/sglang-releases/_deps \
  openai==3.57.0 distro jiter sniffio partial_json_parser
for v in $RELEASES; do
  [ -f ".venv/sglang-releases/$v/sglang/__init__.py" ] || .venv/bin/python -m pip install -q --no-deps --target ".venv/sglang-releases/$v" "sglang==$v"
done
