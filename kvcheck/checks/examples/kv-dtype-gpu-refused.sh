# example: kv-dtype-gpu-refused error
# run: kvcheck preflight -f kv-dtype-gpu-refused.sh --sglang-version 0.5.23 --gpu h100
# The decode asks for an NVFP4 KV cache on Hopper: 0.5.23's handle_kv4_compatibility
# refuses it at start-up ("--kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. Use
# --kv-cache-dtype=fp4_mx_block16 for the block-size-16 FP4 recipe."). (The start-up
# refusal's id; the check kv-dtype-gpu is about a KV dtype comparison on an assumed GPU.)
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --kv-cache-dtype nvfp4 &
