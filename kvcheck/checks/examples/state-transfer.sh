# example: state-transfer error
# run: kvcheck preflight -f state-transfer.sh --sglang-version 0.5.23 --gpu h100
# gpt-oss, prefill TP 1 -> decode TP 4: the 'swa' state is sent by head slices, which
# _get_mha_head_slice_blocks refuses for the HND layout SGLANG_USE_HND_KVCACHE selects.
M=openai/gpt-oss-20b
SGLANG_USE_HND_KVCACHE=1 python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --tp-size 4 &
