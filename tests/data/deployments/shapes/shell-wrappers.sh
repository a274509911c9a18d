#!/bin/bash
# Written for kvcheck's tests: wrappers, arrays and a "$@" function.
MODEL=Qwen/Qwen3-8B
ARGS=(
  --model-path "$MODEL"
  --disaggregation-mode prefill
  --tp-size 2   # two GPUs
  --page-size 16
)
exec numactl --cpunodebind=0 --membind=0 -- python3 -m sglang.launch_server "${ARGS[@]}" --port 30000 2>&1 | tee prefill.log &
DEC_ARGS=(--model-path "$MODEL" --disaggregation-mode decode --tp-size 2 --page-size 16 --port 30001)
time taskset -c 0-15 stdbuf -oL timeout 3600 env -i PATH=/usr/bin python3 -m sglang.launch_server "${DEC_ARGS[@]}"
start() {
  exec python3 -m sglang.launch_server "$@"
}
start --model-path Qwen/Qwen3-8B --disaggregation-mode decode --tp-size 2 --page-size 16 --port 30002
