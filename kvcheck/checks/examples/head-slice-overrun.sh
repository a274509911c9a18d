# example: head-slice-overrun error
# run: kvcheck preflight -f head-slice-overrun.sh --sglang-version 0.5.14 --gpu h100
# Llama 8B has 8 KV heads: a TP 4 prefill into a TP 16 decode (heads replicated on the
# decode). SGLang 0.5.13 .. 0.5.16 prepare a head-slice list that runs past the registered
# KV region, and NIXL refuses it (NIXL_ERR_NOT_FOUND) at registration; 0.5.17 counts
# replicated heads once.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --tp-size 4 \
  --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --tp-size 16 \
  --port 30001 &
