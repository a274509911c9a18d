# example: hisparse-radix-cache error
# run: kvcheck preflight -f hisparse-radix-cache.sh --sglang-version 0.5.23 --gpu h100
# The prefill refuses to start (--enable-hisparse with the radix cache on); SGLang
# 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# hisparse-radix-prefill.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --enable-hisparse --port \
  30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 &
