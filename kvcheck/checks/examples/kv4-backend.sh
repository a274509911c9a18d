# example: kv4-backend error
# run: kvcheck preflight -f kv4-backend.sh --sglang-version 0.5.23 --gpu h100
# FP4 KV with the default attention backend of an MHA model: handle_kv4_compatibility
# takes only triton, torch_native, flex_attention or trtllm_mha.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 \
  --kv-cache-dtype fp4_mx_block16 --port 30001 &
