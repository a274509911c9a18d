# example: mooncake-efa error
# run: kvcheck preflight -f mooncake-efa.sh --sglang-version 0.5.23 --gpu h100
# MOONCAKE_PROTOCOL=efa with an NVLINK custom memory pool:
# _validate_efa_allocator_compatibility (0.5.21 on) refuses, the libfabric EFA provider
# cannot transfer CUDA VMM allocations.
MOONCAKE_PROTOCOL=efa SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30000 &
MOONCAKE_PROTOCOL=efa SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
