# Written for kvcheck's tests: a YAML/shell layer stripped the JSON value's double quotes.
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill --page-size 16 \
  --disaggregation-transfer-backend nixl --port 30000 \
  --preferred-sampling-params {temperature:0.7,top_p:0.8} &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode --page-size 16 \
  --disaggregation-transfer-backend nixl --port 30001
