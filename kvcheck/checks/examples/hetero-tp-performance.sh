# example: hetero-tp-performance warning
# run: kvcheck preflight -f hetero-tp-performance.sh --sglang-version 0.5.23 --gpu h100
# Prefill TP 1, decode TP 2 on a GQA model: the runtime moves KV by head slices and logs
# 'Performance is NOT guaranteed when using different TP sizes for non-MLA models.'
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --tp-size 2 &
