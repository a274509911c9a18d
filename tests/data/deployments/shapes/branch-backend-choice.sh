#!/bin/bash
# Written for kvcheck's tests: one condition picks the transfer backend of both servers.
if [ "$USE_NIXL" = 1 ]; then BACKEND=nixl; else BACKEND=mooncake; fi
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill \
  --disaggregation-transfer-backend $BACKEND --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode \
  --disaggregation-transfer-backend $BACKEND --page-size 16 --port 30001 &
wait
