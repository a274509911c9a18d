# example: mooncake-worker-dies error
# run: kvcheck preflight -f mooncake-worker-dies.sh --sglang-version 0.5.9 --gpu h100
# gpt-oss (sliding-window hybrid) over Mooncake on SGLang 0.5.9, attention TP 2 -> 4:
# maybe_send_extra refuses unequal TP for the SWA state and the prefill's transfer thread
# dies ('Prefill instance with bootstrap_port=8998 is dead').
python3 -m sglang.launch_server --model-path openai/gpt-oss-20b \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 64 \
  --tp-size 2 --port 30000 &
python3 -m sglang.launch_server --model-path openai/gpt-oss-20b \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 64 --tp-size \
  4 --port 30001 &
