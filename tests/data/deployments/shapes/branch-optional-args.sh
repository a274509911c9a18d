#!/bin/bash
# Written for kvcheck's tests: optional flags built only when a variable is given.
SERVED_ARG=""
if [[ -n "$SERVED_NAME" ]]; then
  SERVED_ARG="--served-model-name $SERVED_NAME"
fi
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B $SERVED_ARG --disaggregation-mode prefill --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B $SERVED_ARG --disaggregation-mode decode --page-size 16 --port 30001 &
