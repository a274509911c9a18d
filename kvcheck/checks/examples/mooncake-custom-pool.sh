# example: mooncake-custom-pool warning
# run: kvcheck preflight -f mooncake-custom-pool.sh --sglang-version 0.5.23 --gpu h100
# SGLANG_MOONCAKE_CUSTOM_MEM_POOL=nvlink (lower case) is not a pool type SGLang knows
# (NVLINK, BAREX, INTRA_NODE_NVLINK; 'true' for NVLINK): the servers silently run without
# a custom memory pool.
SGLANG_MOONCAKE_CUSTOM_MEM_POOL=nvlink python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30000 &
SGLANG_MOONCAKE_CUSTOM_MEM_POOL=nvlink python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
