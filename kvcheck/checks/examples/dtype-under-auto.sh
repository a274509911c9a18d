# example: dtype-under-auto error
# run: kvcheck preflight -f dtype-under-auto.sh --sglang-version 0.5.23 --gpu h100
# --kv-cache-dtype auto on both sides passes the decode's string comparison, but the KV
# element type follows --dtype: bfloat16 (the model's) on the prefill, float32 on the decode.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --dtype float32 &
