# example: unresolved-variable unchecked
# run: kvcheck preflight -f unresolved-variable.sh --sglang-version 0.5.23 --gpu h100
# $TP is set nowhere in the file and no --env gives it: the decode's --tp-size, and so the
# pair, cannot be read. (kvcheck never fills it from its own environment unless asked to,
# --inherit-env.)
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --tp-size $TP &
