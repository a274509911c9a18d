# example: not-modeled unchecked
# run: kvcheck preflight -f not-modeled.sh --sglang-version 0.5.23 --gpu h100
# Gemma 4's config lists hybrid attention layer_types that kvcheck has not verified against
# SGLang's pools: it computes no plan rather than guess one.
M=google/gemma-4-26B-A4B
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
