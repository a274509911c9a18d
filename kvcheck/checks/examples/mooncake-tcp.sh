# example: mooncake-tcp info
# run: kvcheck preflight -f mooncake-tcp.sh --sglang-version 0.5.23 --gpu h100
# MC_FORCE_TCP=1 on both servers (as --disaggregation-transfer-backend mooncake_tcp sets it):
# Mooncake passes no RDMA devices to its transfer engine, so --disaggregation-ib-device is
# ignored. (On one server only, the transports differ: mooncake-protocol.)
MC_FORCE_TCP=1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 \
  --disaggregation-ib-device mlx5_0 --port 30000 &
MC_FORCE_TCP=1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
