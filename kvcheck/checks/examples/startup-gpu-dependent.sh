# example: startup-gpu-dependent warning
# run: kvcheck preflight -f startup-gpu-dependent.sh --sglang-version 0.5.23 --prefill-gpu h100
# Both sides spell the KV dtype bfloat16; the prefill runs on Hopper, the decode's GPU is
# not named: on Hopper the decode starts, on a Blackwell its default trtllm_mla backend
# refuses the bfloat16 spelling (it takes bf16).
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype bfloat16 --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype bfloat16 --port 30001 &
