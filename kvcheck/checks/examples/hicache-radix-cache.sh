# example: hicache-radix-cache error
# run: kvcheck preflight -f hicache-radix-cache.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--enable-hierarchical-cache with the radix cache off (a PD
# decode turns it off unless --disaggregation-decode-enable-radix-cache)); SGLang 0.5.23's
# own start-up refuses these flags in tests/test_startup.py's case hicache-on-pd-decode.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hierarchical-cache \
  --port 30001 &
