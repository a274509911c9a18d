# example: missing-role error
# run: kvcheck preflight -f missing-role.sh --sglang-version 0.5.23 --gpu h100
# Two prefills and no decode: the router sends each request to a prefill and a decode, and
# no request completes.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 --disaggregation-bootstrap-port 8998 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --disaggregation-bootstrap-port 8999 &
