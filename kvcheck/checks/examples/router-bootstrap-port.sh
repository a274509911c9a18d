# example: router-bootstrap-port error
# run: kvcheck preflight -f router-bootstrap-port.sh --sglang-version 0.5.23 --gpu h100
# The router gives the decode bootstrap port 9000 for the prefill, which serves its
# bootstrap server on 8998: the decode asks the wrong port and requests time out.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 --disaggregation-bootstrap-port 8998 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
python3 -m sglang_router.launch_router --pd-disaggregation \
  --prefill http://127.0.0.1:30000 9000 --decode http://127.0.0.1:30001 --port 8000
