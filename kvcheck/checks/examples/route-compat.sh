# example: route-compat error
# run: kvcheck preflight -f route-compat.sh --prefill-sglang-version 0.5.23 --decode-sglang-version 0.5.22 --gpu h100
# The 0.5.23 prefill's bootstrap server sends enable_kv_cache_sharding in its /route reply;
# the 0.5.22 decode's PrefillServerInfo(**reply) raises TypeError on the unknown key.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
