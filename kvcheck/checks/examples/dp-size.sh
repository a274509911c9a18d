# example: dp-size error
# run: kvcheck preflight -f dp-size.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--dp-size > 1 combined with attention DP); SGLang 0.5.23's
# own start-up refuses these flags in tests/test_startup.py's case dp-and-attn-dp.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --tp-size 8 --dp-size 2 \
  --attn-dp-size 4 --port 30001 &
