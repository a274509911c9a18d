# example: kv-cache-dtype-mismatch error
# run: kvcheck preflight -f kv-cache-dtype-mismatch.sh --sglang-version 0.5.23 --gpu h100
# The decode compares the prefill bootstrap server's --kv-cache-dtype string with its own
# on the first request: fp8_e4m3 against auto raises 'KV cache dtype mismatch'.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 \
  --kv-cache-dtype fp8_e4m3 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
