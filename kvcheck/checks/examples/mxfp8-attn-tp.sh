# example: mxfp8-attn-tp error
# also: state-transfer error
# run: kvcheck preflight -f mxfp8-attn-tp.sh --sglang-version 0.5.23 --gpu b200
# MXFP8 KV (block scales) with attention TP 1 -> 2: the decode refuses different attention
# TP sizes with MXFP8 block scales.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 \
  --kv-cache-dtype mxfp8 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 \
  --kv-cache-dtype mxfp8 --tp-size 2 --port 30001 &
