# example: dsa-kv-cache-dtype error
# run: kvcheck preflight -f dsa-kv-cache-dtype.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (a DSA model with a --kv-cache-dtype other than
# bf16/bfloat16/fp8_e4m3 (auto)); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case dsa-kv-dtype-e5m2.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse \
  --kv-cache-dtype fp8_e5m2 --port 30001 &
