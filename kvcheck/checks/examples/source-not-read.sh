# example: source-not-read info
# run: kvcheck preflight -f source-not-read.sh --sglang-version 0.5.23 --gpu h100
# The script sources cluster.env, which is not beside it: the variables it sets stay unset
# (here only the port, an address that shapes no KV transfer).
source ./cluster.env
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port $DECODE_PORT &
