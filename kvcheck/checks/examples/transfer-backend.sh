# example: transfer-backend error
# run: kvcheck preflight -f transfer-backend.sh --sglang-version 0.5.23 --gpu h100
# The decode leaves --disaggregation-transfer-backend at its default, mooncake: its first ZMQ
# message fails the NIXL prefill's bootstrap-thread assert and requests hang.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --page-size 16 --port 30001 &
