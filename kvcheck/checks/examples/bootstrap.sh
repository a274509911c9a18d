# example: page-size-mismatch error
# run: kvcheck preflight -f bootstrap.sh --sglang-version 0.5.23 --gpu h100
# The decode compares the prefill bootstrap server's page size with its own on the first
# request and raises 'Page size mismatch'.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 32 --port 30001 &
