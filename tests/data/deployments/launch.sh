#!/usr/bin/env bash
# Prefill and decode on one host, then the router.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen3-8B}
export TP=2
PREFILL_PORT=30000

nohup python3 -m sglang.launch_server \
  --model-path "$MODEL" \
  --tp-size ${TP} \
  --port $PREFILL_PORT \
  --disaggregation-mode prefill \
  --disaggregation-bootstrap-port 8998 \
  --disaggregation-transfer-backend nixl > prefill.log 2>&1 &

docker run --gpus all --network host -e UCX_TLS=rc,cuda_copy -e NIXL_LOG=1 \
  lmsysorg/sglang:v0.5.23 \
  bash -c "pip list | grep nixl && exec python3 -m sglang.launch_server --model-path $MODEL --tp-size ${DECODE_TP} --port 30001 --base-gpu-id 2 --disaggregation-mode decode --disaggregation-transfer-backend nixl"

CUDA_VISIBLE_DEVICES=4,5 env SGLANG_X=1 sglang serve --model-path $MODEL --port 30002 --tp-size $TP \
    --disaggregation-mode decode --disaggregation-transfer-backend nixl &

python -m sglang_router.launch_router --pd-disaggregation \
  --prefill http://127.0.0.1:$PREFILL_PORT 8998 \
  --decode http://127.0.0.1:30001 --decode http://127.0.0.1:30002 --port 8000
