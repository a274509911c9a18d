# example: nixl-ib-device error
# run: kvcheck preflight -f connector-startup.sh --sglang-version 0.5.23 --gpu h100
# NixlKVManager.__init__ takes --disaggregation-ib-device as HCA names: a port suffix
# (mlx5_0:1) stops the server after it loads the model.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --disaggregation-ib-device mlx5_0:1 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
