# example: decode-radix-cache-incompatible error
# run: kvcheck preflight -f decode-radix-cache-incompatible.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--disaggregation-decode-enable-radix-cache with HiSparse,
# the fake backend, or a speculative algorithm other than EAGLE/EAGLE3/DSPARK); SGLang
# 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# decode-radix-hisparse.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse \
  --disaggregation-decode-enable-radix-cache --port 30001 &
