# example: dcp-geometry error
# run: kvcheck preflight -f dcp-geometry.sh --sglang-version 0.5.23 --gpu h100
# A DCP 2 decode whose KV geometry differs from the prefill's (bfloat16 against fp8_e4m3):
# the DCP relayout refuses 'PD DCP source/destination KV geometry differs'.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 \
  --kv-cache-dtype fp8_e4m3 --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 2 \
  --dcp-size 2 --kv-cache-dtype bfloat16 --port 30001 &
