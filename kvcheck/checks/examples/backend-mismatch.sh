# example: backend-mismatch error
# also: one-backend error
# run: kvcheck preflight -f backend-mismatch.sh --sglang-version 0.5.23 --gpu h100
# The prefill leaves --disaggregation-transfer-backend at its default, mooncake; the
# decode runs NIXL. Its first ZMQ message reaches the Mooncake prefill's bootstrap thread,
# which dies on it: requests time out.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --page-size 16 --disaggregation-transfer-backend nixl --port 30001 &
