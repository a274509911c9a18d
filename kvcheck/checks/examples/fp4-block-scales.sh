# example: fp4-block-scales error
# run: kvcheck preflight -f fp4-block-scales.sh --sglang-version 0.5.23 --gpu b200
# With FP4 KV SGLang 0.5.23 registers only the packed data with NIXL, not the block-scale
# buffers beside it: the decode dequantizes the prompt's KV with scales nobody wrote.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --tp-size 2 --kv-cache-dtype fp4_mx_block16 --attention-backend triton &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --tp-size 2 --kv-cache-dtype fp4_mx_block16 --attention-backend triton &
