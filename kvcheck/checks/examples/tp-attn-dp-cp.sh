# example: tp-attn-dp-cp error
# run: kvcheck preflight -f tp-attn-dp-cp.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--tp-size not divisible by attention DP x attention CP);
# SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# tp-not-divisible-attn-dp.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --tp-size 4 --attn-dp-size 8 \
  --port 30001 &
