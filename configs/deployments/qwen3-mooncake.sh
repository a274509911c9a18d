#!/usr/bin/env bash
# Qwen3 32B, 2 prefills and 1 decode on one node, Mooncake transfer (SGLang's default
# backend), as a launch script. kvcheck restates Mooncake's transfer (TP2 prefills into a
# TP4 decode: the head-slice path, send_kvcache_slice) beside the decode's bootstrap
# checks (page size, KV dtype) that every backend runs: WARN (head slices are slower), exit 0.
#   kvcheck preflight -f configs/deployments/qwen3-mooncake.sh
MODEL=Qwen/Qwen3-32B

python3 -m sglang.launch_server --model-path $MODEL --disaggregation-mode prefill \
  --tp-size 2 --page-size 64 --port 30000 --disaggregation-bootstrap-port 8998 \
  --base-gpu-id 0 &
python3 -m sglang.launch_server --model-path $MODEL --disaggregation-mode prefill \
  --tp-size 2 --page-size 64 --port 30001 --disaggregation-bootstrap-port 8999 \
  --base-gpu-id 2 &
python3 -m sglang.launch_server --model-path $MODEL --disaggregation-mode decode \
  --tp-size 4 --page-size 64 --port 30002 --base-gpu-id 4 &

python3 -m sglang_router.launch_router --pd-disaggregation \
  --prefill http://127.0.0.1:30000 8998 --prefill http://127.0.0.1:30001 8999 \
  --decode http://127.0.0.1:30002 --port 8000
