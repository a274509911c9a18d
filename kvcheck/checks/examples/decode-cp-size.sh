# example: decode-cp-size error
# run: kvcheck preflight -f decode-cp-size.sh --sglang-version 0.5.23 --gpu h100
# A decode with attention context parallelism: its rank mapping asserts a decode CP size
# of 1.
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --tp-size 2 \
  --port 30000 &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --tp-size 2 \
  --attn-cp-size 2 --port 30001 &
