# example: decode-host-receive-threshold error
# run: kvcheck preflight -f decode-host-receive-threshold.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--disaggregation-decode-host-receive-threshold outside [0,
# 1]); SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# host-receive-range.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl \
  --disaggregation-decode-host-receive-threshold 1.5 --port 30001 &
