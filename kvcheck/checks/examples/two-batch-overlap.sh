# example: two-batch-overlap error
# run: kvcheck preflight -f two-batch-overlap.sh --sglang-version 0.5.23 --gpu h100
# --enable-two-batch-overlap without an EP all-to-all backend (--moe-a2a-backend none) and
# without attention DP: ServerArgs refuses it.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --enable-two-batch-overlap --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --port 30001 &
