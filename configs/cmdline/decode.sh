# A launch command line, as a deployment manifest would run it.
SGLANG_DISAGGREGATION_NIXL_BACKEND=UCX \
python -m sglang.launch_server \
  --model-path configs/models/llama-3.1-8b \
  --disaggregation-mode decode \
  --disaggregation-transfer-backend nixl \
  --tp-size 2 \
  --page-size 16
