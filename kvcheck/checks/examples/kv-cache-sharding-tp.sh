# example: kv-cache-sharding-tp error
# run: kvcheck preflight -f kv-cache-sharding-tp.sh --sglang-version 0.5.23 --gpu h100
# An MLA prefill with --enable-kv-cache-sharding at TP 8 and a TP 4 decode: the decode's
# rank mapping requires the same attention TP with sharded KV.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --enable-kv-cache-sharding --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 4 \
  --port 30001 &
