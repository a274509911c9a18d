# example: nixl-backend-params error
# run: kvcheck preflight -f nixl-backend-params.sh --sglang-version 0.5.23 --gpu h100
# NixlKVManager.__init__ reads SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS with json.loads and
# requires string values: an unquoted number stops the server at start-up.
SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"num_threads": 8}' python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"num_threads": 8}' python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
