# example: chunked-prefill-page error
# run: kvcheck preflight -f chunked-prefill-page.sh --sglang-version 0.5.23 --gpu h100
# The prefill refuses to start (a --chunked-prefill-size (divided by attention DP) that is
# not a multiple of the resolved page size); SGLang 0.5.23's own start-up refuses these
# flags in tests/test_startup.py's case chunk-not-page-multiple.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 \
  --chunked-prefill-size 1000 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 &
