# example: staging-chunk-size error
# run: kvcheck preflight -f staging-chunk-size.sh --sglang-version 0.5.23 --gpu h100
# SGLANG_DISAGG_STAGING_BUFFER with chunked prefill off (-1):
# PrefillBootstrapQueue.__init__ requires a chunk size that is a positive multiple of the
# page size.
SGLANG_DISAGG_STAGING_BUFFER=1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 \
  --chunked-prefill-size -1 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 &
