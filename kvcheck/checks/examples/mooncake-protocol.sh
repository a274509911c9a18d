# example: mooncake-protocol unchecked
# run: kvcheck preflight -f mooncake-protocol.sh --sglang-version 0.5.23 --gpu h100
# MOONCAKE_PROTOCOL differs (tcp on the prefill, rdma by default on the decode): whether
# the prefill's engine can write into the decode's segment depends on Mooncake's transport
# selection, which kvcheck does not restate.
MOONCAKE_PROTOCOL=tcp python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
