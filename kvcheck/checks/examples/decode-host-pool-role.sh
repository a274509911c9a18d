# example: decode-host-pool-role error
# run: kvcheck preflight -f decode-host-pool-role.sh --sglang-version 0.5.23 --gpu h100
# The prefill refuses to start (the host-pool retraction backup (or host receive) on a
# server that is not a PD decode); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case host-receive-on-prefill.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl \
  --disaggregation-decode-host-receive-threshold 0.5 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 &
