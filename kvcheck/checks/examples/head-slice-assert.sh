# example: head-slice-assert error
# run: kvcheck preflight -f head-slice-assert.sh --sglang-version 0.5.23 --gpu h100
# Llama 8B has 8 KV heads; prefill TP 16 -> decode TP 32 replicates them, and
# _init_hetero_tp_prep_handle's head slices do not tile the pages (num_groups = 32 // 16
# // 4 = 0): an assert fails at registration.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --tp-size 16 \
  --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --tp-size 32 \
  --port 30001 &
