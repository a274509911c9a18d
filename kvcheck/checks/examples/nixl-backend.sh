# example: nixl-backend error
# run: kvcheck preflight -f nixl-backend.sh --sglang-version 0.5.23 --gpu h100
# Each side creates only the NIXL backend SGLANG_DISAGGREGATION_NIXL_BACKEND names: a
# LIBFABRIC prefill and a UCX (default) decode share no backend.
SGLANG_DISAGGREGATION_NIXL_BACKEND=LIBFABRIC python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
