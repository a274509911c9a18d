# example: hisparse-dsa-backend error
# run: kvcheck preflight -f hisparse-dsa-backend.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (a DSA backend HiSparse cannot use for this KV dtype);
# SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# hisparse-dsa-decode-backend-bf16.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse \
  --kv-cache-dtype bfloat16 --dsa-decode-backend flashmla_kv --port 30001 &
