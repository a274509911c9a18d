# example: decode-allocation-policy error
# run: kvcheck preflight -f decode-allocation-policy.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--disaggregation-decode-allocation-policy prefill_complete
# with a feature it does not support (NIXL among them)); SGLang 0.5.23's own start-up
# refuses these flags in tests/test_startup.py's case prefill-complete-nixl.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl \
  --disaggregation-decode-allocation-policy prefill_complete --port 30001 &
