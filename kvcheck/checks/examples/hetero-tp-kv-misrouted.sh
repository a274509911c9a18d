# example: hetero-tp-kv-misrouted error
# run: kvcheck preflight -f hetero-tp-kv-misrouted.sh --sglang-version 0.5.23 --gpu h100
# Unequal attention TP (2 -> 4) with an uneven prefill PP partition (20 + 12 layers):
# get_mha_kv_ptrs_with_pp pairs stage 0's V slices with decode K regions; nothing raises.
SGLANG_PP_LAYER_PARTITION=20,12 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --tp-size 2 --pp-size 2 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --tp-size 4 &
