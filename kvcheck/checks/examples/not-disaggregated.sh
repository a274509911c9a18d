# example: not-disaggregated warning
# run: kvcheck preflight -f not-disaggregated.sh --sglang-version 0.5.23 --gpu h100
# A third server without --disaggregation-mode among the PD servers: it takes no part in KV
# transfer (if the router sends it PD traffic, it was meant to have a role).
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --page-size 16 --port 30002 &
