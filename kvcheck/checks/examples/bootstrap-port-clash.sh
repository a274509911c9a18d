# example: bootstrap-port-clash error
# run: kvcheck preflight -f bootstrap-port-clash.sh --sglang-version 0.5.23 --gpu h100
# Two prefills started on node1, both with the default --disaggregation-bootstrap-port 8998:
# start_disagg_service binds it on each, and the second bind fails at start-up.
ssh node1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 --base-gpu-id 0 &
ssh node1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --base-gpu-id 1 &
ssh node2 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30002 --base-gpu-id 2 &
