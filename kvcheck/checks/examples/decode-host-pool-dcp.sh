# example: decode-host-pool-dcp error
# run: kvcheck preflight -f decode-host-pool-dcp.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (the host-pool retraction backup (or host receive) with
# --dcp-size > 1); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case host-receive-dcp.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --tp-size 2 --dcp-size 2 \
  --disaggregation-decode-host-receive-threshold 0.5 --port 30001 &
