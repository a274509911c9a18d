# example: nodes error
# run: kvcheck preflight -f nodes.sh --sglang-version 0.5.23 --gpu h100
# The prefill refuses to start (a TP x PP world that does not split across --nnodes, or
# --dp-size replicas across nodes); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case tp-nnodes.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --tp-size 8 --nnodes 3 \
  --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 &
