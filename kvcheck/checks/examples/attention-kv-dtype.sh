# example: attention-kv-dtype error
# run: kvcheck preflight -f attention-kv-dtype.sh --sglang-version 0.5.23 --gpu b200
# The decode refuses to start (a --kv-cache-dtype spelling the attention backend refuses
# (trtllm_mla takes fp8_e4m3, bf16 or auto; not bfloat16)); SGLang 0.5.23's own start-up
# refuses these flags in tests/test_startup.py's case trtllm-mla-bfloat16-spelling.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --kv-cache-dtype bfloat16 \
  --port 30001 &
