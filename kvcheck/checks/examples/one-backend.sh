# example: one-backend error
# run: kvcheck preflight -f one-backend.sh --sglang-version 0.5.23 --gpu h100
# One decode on NIXL, the other on Mooncake: once the router mixes them, a NIXL prefill
# receives a Mooncake decode's registration.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port 30002 &
