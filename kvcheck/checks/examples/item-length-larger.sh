# example: item-length-larger error
# also: dtype-under-auto error
# run: kvcheck preflight -f item-length-larger.sh --sglang-version 0.5.23 --gpu h100
# The decode's float32 KV items are twice the prefill's bfloat16 ones: the prefill writes
# its items at the decode's stride without any error, and the decode reads garbage.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --dtype float32 &
