# example: mooncake-unchecked unchecked
# run: kvcheck preflight -f mooncake-unchecked.sh --sglang-version 0.5.23 --gpu h100
# A Mooncake prefill with KV cache sharding: which of its ranks send which pages is not
# restated for Mooncake, so the transfer is unchecked.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 64 \
  --tp-size 8 --enable-kv-cache-sharding --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 64 --tp-size \
  8 --port 30001 &
