# example: hisparse-model error
# run: kvcheck preflight -f hisparse-model.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--enable-hisparse on a model that is not DSA, DeepSeek V4
# or MiniMax M3); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case hisparse-model-llama.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse --port \
  30001 &
