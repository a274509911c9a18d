# example: state-components unchecked
# run: kvcheck preflight -f state-components.sh --sglang-version 0.5.20 --gpu h100
# gpt-oss's sliding-window layers register an 'swa' state component beside the KV regions;
# kvcheck restates its transfer for SGLang 0.5.22 and 0.5.23 only.
M=openai/gpt-oss-20b
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
