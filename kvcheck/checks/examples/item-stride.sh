# example: item-stride error
# run: kvcheck preflight -f item-stride.sh --sglang-version 0.5.23 --gpu b200
# DSA fp8 rows by role backend: the prefill's flashmla_kv stores 656-byte scaled rows, the
# decode's trtllm 576-byte raw rows; _prep_equal_tp_dlist refuses a transfer longer than
# the item stride.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend flashmla_kv --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype fp8_e4m3 --dsa-decode-backend trtllm --port 30001 &
