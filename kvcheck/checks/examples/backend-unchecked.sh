# example: backend-unchecked unchecked
# run: kvcheck preflight -f backend-unchecked.sh --sglang-version 0.5.23 --gpu h100
# MORI moves the KV here; kvcheck models the NIXL and Mooncake transfers only, so the pair
# is unchecked, never passed.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mori --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mori --page-size 16 --port 30001 &
