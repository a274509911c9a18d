# example: decode-host-destination error
# run: kvcheck preflight -f decode-host-destination.sh --sglang-version 0.5.23 --gpu h100
# Decode host receive (threshold < 1) needs a connector that writes into host memory;
# NixlKVManager.supports_host_destination is False, so DecodePreallocQueue refuses at
# start-up.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 \
  --disaggregation-decode-host-receive-threshold 0.5 --port 30001 &
