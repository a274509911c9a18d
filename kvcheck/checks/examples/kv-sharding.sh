# example: kv-sharding error
# run: kvcheck preflight -f kv-sharding.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--enable-kv-cache-sharding where it is not supported (not a
# PD prefill, speculative decoding, DCP, HiSparse, HiCache storage)); SGLang 0.5.23's own
# start-up refuses these flags in tests/test_startup.py's case kv-sharding-decode.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-kv-cache-sharding \
  --port 30001 &
