# Written for kvcheck's tests: the TP size is a placeholder (it shapes the KV regions).
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size <TP> \
  --disaggregation-mode prefill --page-size 16 --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size 2 \
  --disaggregation-mode decode --page-size 16 --disaggregation-transfer-backend nixl --port 30001
