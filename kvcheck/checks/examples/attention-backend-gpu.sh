# example: attention-backend-gpu error
# run: kvcheck preflight -f attention-backend-gpu.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (an attention backend this GPU (or this use of it) does not
# support); SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's
# case trtllm-mla-on-hopper.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --attention-backend \
  trtllm_mla --port 30001 &
