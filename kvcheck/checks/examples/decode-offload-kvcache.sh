# example: decode-offload-kvcache error
# run: kvcheck preflight -f decode-offload-kvcache.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--disaggregation-decode-enable-offload-kvcache off the
# decode, without a HiCache storage backend, or with host_pool retraction); SGLang
# 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# decode-offload-no-storage.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl \
  --disaggregation-decode-enable-offload-kvcache --port 30001 &
