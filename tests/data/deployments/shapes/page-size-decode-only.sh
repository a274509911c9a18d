# Written for kvcheck's tests: only the decode pins --page-size.
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B \
  --disaggregation-mode prefill --port 30000 &

python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B \
  --disaggregation-mode decode --port 30001 \
  --page-size 16
