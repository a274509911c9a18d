# example: decode-radix-disabled info
# run: kvcheck preflight -f startup-log.sh --sglang-version 0.5.23 --gpu h100
# Every PD decode without --disaggregation-decode-enable-radix-cache logs 'Radix cache is
# disabled for decode server' at start-up (handle_pd_disaggregation): expected, not a fault.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
