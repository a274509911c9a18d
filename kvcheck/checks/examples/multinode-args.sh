# example: multinode-args error
# run: kvcheck preflight -f multinode-args.sh --sglang-version 0.5.23 --gpu h100
# A decode over two nodes (one --dist-init-addr) whose node 1 says --tp-size 8 where node 0
# says 16: each node computes its ranks from its own flags, and the group never forms.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 --tp-size 8 &
# node 0 of the decode
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --tp-size 16 --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000 &
# node 1 of the decode
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --tp-size 8 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000 &
