#!/usr/bin/env bash
# Set up .venv with everything the test suite uses: kvcheck and its test tools (with
# ruff and mypy for scripts/lint.sh), SGLang
# 0.5.23 (its own decision code, driven on CPU), NIXL (real agents over UCX on
# loopback), and Debian's etcd-server (a real etcd for the NIXL metadata tests).
# Idempotent; safe to re-run (a complete .venv is detected and left alone).
#
# CPU only: torch 2.13.0 is the CPU build (from a local wheel when the machine has one,
# else PyTorch's CPU index), so no CUDA torch or NVIDIA libraries are pulled in; SGLang
# and nixl-cu12 are installed with --no-deps (requirements/runtime.txt and
# requirements/nixl.txt list what their code imports on CPU). torchvision has no CPU
# wheel beside torch 2.13: the tests put a stand-in module on the path (tests/stubs).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
STAMP=.venv/.kvcheck-test-env
WANT="$(cat requirements/runtime.txt requirements/nixl.txt requirements/mooncake.txt pyproject.toml scripts/setup-test-env.sh | cksum)"
start=$(date +%s)

if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing etcd-server (Debian)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null \
      || echo "warning: etcd-server could not be installed; the etcd tests will be skipped"
  else
    echo "warning: no etcd binary and no root apt-get; the etcd tests will be skipped"
  fi
fi

# The fabric tests (tests/test_fabric_netns.py) build hosts from network namespaces, veth
# and a bridge (iproute2: ip, tc) and inject faults with tc and iptables; skipped without them.
for tool in ip:iproute2 tc:iproute2 iptables:iptables; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "== installing ${tool#*:} (Debian)"
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tool#*:}" >/dev/null; } \
        || echo "warning: ${tool#*:} could not be installed; the fabric namespace tests will be skipped"
    else
      echo "warning: no ${tool%%:*} and no root apt-get; the fabric namespace tests will be skipped"
    fi
  fi
done

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x .venv/bin/python ]; then
  echo "== test environment up to date ($(du -sh .venv | cut -f1))"
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# One resolver pass for everything with dependencies, one for the --no-deps packages;
# --no-compile: byte-code is written on first import, only for what the tests import
# (compiling all of torch, triton, transformers and SGLang up front costs minutes).
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check --no-compile)
if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  TORCH=(/opt/wheels/torch-2.13.0+cpu-*.whl)
else
  TORCH=(torch==2.13.0 --extra-index-url "$TORCH_CPU_INDEX")
fi
echo "== installing kvcheck, test tools (pytest, ruff, mypy: the .[test] extra), torch 2.13.0 (CPU build) and what SGLang's decision code and NIXL import on CPU"
"${PIP[@]}" -e '.[test]' "${TORCH[@]}" -r requirements/runtime.txt -r requirements/nixl.txt -r requirements/mooncake.txt
echo "== installing SGLang 0.5.23 and NIXL (nixl-cu12 1.5.1), both --no-deps"
"${PIP[@]}" --no-deps sglang==0.5.23 nixl-cu12==1.5.1
if .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)"; then :; else
  echo "warning: the installed torch is a CUDA build; the tests only need the CPU one"
fi
# Several SGLang releases side by side, each --no-deps in its own folder, for the
# per-release conformance tests (tests/test_conformance_releases.py runs each in its own
# process with PYTHONPATH=.venv/sglang-releases/X). The releases are those whose PD path
# changed (see kvcheck/sglang/pd_release.py); _deps holds what their imports need beyond
# kvcheck's own environment. 0.5.20: the prefill's per-entry DCP geometry check (its
# 0.5.17 .. 0.5.19 whole-list form is driven on 0.5.17). 0.5.5 (oldest modeled: no v1
# checks, per-request lists from the start layer), 0.5.7 (v1 PP assert, whole-list
# pairing), 0.5.12.post1 (lists built in transfer worker threads).
RELEASES=${KVCHECK_SGLANG_RELEASES:-"0.5.5 0.5.7 0.5.8 0.5.10 0.5.12.post1 0.5.13 0.5.16 0.5.17 0.5.20 0.5.21 0.5.22"}
echo "== installing SGLang releases side by side: $RELEASES"
mkdir -p .venv/sglang-releases
# (0.5.16's function-call parser imports xgrammar at import time; older server_args import fastapi,
# whose telemetry module imports opentelemetry when 0.5.7 and older import it.)
for dep in openai distro jiter sniffio partial_json_parser fastapi xgrammar opentelemetry; do
  [ -d ".venv/sglang-releases/_deps/$dep" ] || { "${PIP[@]}" --no-deps --target .venv/sglang-releases/_deps \
    openai==3.57.0 distro jiter sniffio partial_json_parser fastapi==0.165.0 xgrammar==0.2.9 opentelemetry-api; break; }
done
# Four at a time (each is one wheel, --no-deps, into a folder of its own): the download and
# unpacking of eleven wheels one after the other was most of this step's time.
missing=()
for v in $RELEASES; do
  [ -f ".venv/sglang-releases/$v/sglang/__init__.py" ] || missing+=("$v")
done
if [ "${#missing[@]}" -gt 0 ]; then
  printf '%s\n' "${missing[@]}" | xargs -P 4 -I{} "${PIP[@]}" --no-deps --target ".venv/sglang-releases/{}" "sglang=={}"
fi
# Mooncake's transfer engine (requirements/mooncake.txt) links libibverbs, even for TCP.
# Debian's libibverbs1 (+ libnl) is unpacked into .venv/lib/mooncake-ibverbs, not installed:
# in the loader's path it makes NIXL's UCX crash at process exit on hosts without RDMA
# devices (the NIXL tests). kvcheck.mooncake.engine preloads it for Mooncake's processes.
IBV=.venv/lib/mooncake-ibverbs
if [ ! -e "$IBV/libibverbs.so.1" ] && command -v apt-get >/dev/null 2>&1; then
  echo "== unpacking Debian's libibverbs1 for Mooncake into $IBV"
  tmp=$(mktemp -d)
  { [ "$(id -u)" != 0 ] || apt-get update -qq >/dev/null; } && (cd "$tmp" && apt-get download -qq libibverbs1 libnl-3-200 libnl-route-3-200 >/dev/null 2>&1) \
    && mkdir -p "$IBV" && for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/x"; done \
    && cp -a "$tmp"/x/usr/lib/*/libibverbs.so.1* "$tmp"/x/usr/lib/*/libnl-route-3.so.200* "$tmp"/x/lib/*/libnl-3.so.200* "$IBV"/ \
    || echo "warning: libibverbs1 could not be unpacked; the Mooncake probe tests will be skipped"
  rm -rf "$tmp"
fi
echo "$WANT" > "$STAMP"
echo "== test environment ready in $(( $(date +%s) - start )) s; .venv is $(du -sh .venv | cut -f1)"
