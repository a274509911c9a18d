#!/bin/bash
# Written for kvcheck's tests: ./launch.sh prefill | decode, with an argument loop first.
MODEL=Qwen/Qwen3-8B
while [[ $# -gt 1 ]]; do
  case $1 in
    --model) MODEL=$2; shift 2 ;;
    *) break ;;
  esac
done
case "$1" in
  prefill)
    python3 -m sglang.launch_server --model-path $MODEL --disaggregation-mode prefill \
      --page-size 16 --port 30000 ;;
  decode|d)
    python3 -m sglang.launch_server --model-path $MODEL --disaggregation-mode decode \
      --page-size 16 --port 30001
    ;;
  *) echo "usage: $0 prefill|decode"; exit 1 ;;
esac
