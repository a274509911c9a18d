# example: page-size-unpinned warning
# run: kvcheck preflight -f page-size-unpinned.sh --sglang-version 0.5.23
# No --page-size and no GPU named: each server's attention backend picks the page size on
# the GPU it lands on, so the two can disagree.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 &
