# example: staging-buffer error
# run: kvcheck preflight -f staging-buffer.sh --sglang-version 0.5.23 --gpu h100
# SGLANG_DISAGG_STAGING_BUFFER on a MORI decode: ServerArgs takes staging buffers only
# with the mooncake or nixl transfer backend.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mori --page-size 16 --port 30000 &
SGLANG_DISAGG_STAGING_BUFFER=1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mori --page-size 16 --port 30001 &
