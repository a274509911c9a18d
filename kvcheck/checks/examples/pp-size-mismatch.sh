# example: pp-size-mismatch error
# run: kvcheck preflight -f pp-size-mismatch.sh --sglang-version 0.5.23 --gpu h100
# The decode's rank mapping (_resolve_rank_mapping) asserts its PP size is the prefill's
# or 1: a PP 4 decode of a PP 2 prefill raises.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --pp-size 2 \
  --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --pp-size 4 \
  --port 30001 &
