# example: mooncake-silent-corruption error
# run: kvcheck preflight -f mooncake-transfer.sh --sglang-version 0.5.23 --gpu h100
# Mooncake: a prefill PP stage of 17 layers into a PP 1 decode of 32 layers. 32 is not a
# multiple of 17, so get_mha_kv_ptrs_with_pp takes its decode-draft branch and writes the
# stage's V regions into K regions; nothing raises.
SGLANG_PP_LAYER_PARTITION=17,15 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port 30000 \
  --tp-size 2 --pp-size 2 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port 30001 \
  --tp-size 2 &
