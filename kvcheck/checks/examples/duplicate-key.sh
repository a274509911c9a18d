# example: duplicate-key warning
# run: kvcheck preflight -f duplicate-key.sh --sglang-version 0.5.23 --gpu h100
# The decode's --config file writes page-size twice. SGLang reads the file with
# yaml.safe_load, which keeps the later value (32) without a word; kvcheck decides on 32 too
# and says which line won. Here it matches the prefill, so the pair passes with the warning.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 32 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 \
  --config duplicate-key/decode-extra.yaml &
