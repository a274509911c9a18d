# example: unresolved-address info
# run: kvcheck preflight -f unresolved-address.sh --sglang-version 0.5.23 --gpu h100
# --host $POD_IP is filled in at run time; an address shapes no KV transfer, so it is
# checked only for agreement across an instance's nodes.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 --host $POD_IP &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --host $POD_IP &
