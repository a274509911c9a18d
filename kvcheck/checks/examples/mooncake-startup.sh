# example: mooncake-ib-device error
# run: kvcheck preflight -f mooncake-startup.sh --sglang-version 0.5.23 --gpu h100
# A per-GPU --disaggregation-ib-device mapping that misses GPUs 2 and 3 of a TP 4 server:
# Mooncake's start-up raises 'No IB devices configured for GPU 2'.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port 30000 \
  --tp-size 4 --disaggregation-ib-device '{"0": "mlx5_0", "1": "mlx5_1"}' &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port 30001 \
  --tp-size 4 &
