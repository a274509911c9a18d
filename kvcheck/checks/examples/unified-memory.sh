# example: unified-memory error
# run: kvcheck preflight -f unified-memory.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start: SGLang 0.5.23's handle_unified_memory_pool asserts that a PD
# server with --enable-unified-memory uses the Mooncake transfer backend ("...supports only
# these transfer backends: mooncake; got 'nixl'."); tests/test_startup.py's case
# unified-memory-nixl.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 \
  --enable-unified-memory --port 30001 &
