# example: hicache-no-effect info
# run: kvcheck preflight -f hicache-no-effect.sh --sglang-version 0.5.23 --gpu h100
# HiCache keeps a host copy for the radix cache; NIXL still registers and moves the device
# (VRAM) KV pool.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --enable-hierarchical-cache &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
