# example: hicache-dcp error
# run: kvcheck preflight -f hicache-dcp.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (HiCache with --dcp-size > 1 on a model or with a feature it
# does not support); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case hicache-dcp-mha.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --tp-size 2 --dcp-size 2 \
  --enable-hierarchical-cache --disaggregation-decode-enable-radix-cache --port 30001 &
