# example: kv-dtype-gpu unchecked
# run: kvcheck preflight -f kv-dtype-gpu.sh --sglang-version 0.5.23 --prefill-gpu h100
# DeepSeek V3.2 (DSA): --kv-cache-dtype left unset resolves to fp8_e4m3 from SM100 and to
# bfloat16 below. The prefill pins bf16 and runs on Hopper; the decode's GPU is not named, so
# its dtype check passes if it lands on Hopper and fails on Blackwell.
M=deepseek-ai/DeepSeek-V3.2
python3 -m sglang.launch_server --model-path $M --tp-size 8 --kv-cache-dtype bf16 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --port 30000 &
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 &
