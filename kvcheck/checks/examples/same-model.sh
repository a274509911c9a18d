# example: same-model warning
# run: kvcheck preflight -f same-model.sh --sglang-version 0.5.23 --gpu h100
# The runtime never compares models; a different --revision on one side may be another
# checkpoint whose KV the decode then reads.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --revision refs/pr/42 &
