# example: prefill-fake-backend error
# run: kvcheck preflight -f prefill-fake-backend.sh --sglang-version 0.5.23 --gpu h100
# The prefill refuses to start (a prefill with --disaggregation-transfer-backend fake);
# SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# prefill-fake.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend fake --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 &
