# example: hisparse-spec-adaptive error
# run: kvcheck preflight -f hisparse-spec-adaptive.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (--enable-hisparse with --speculative-adaptive); SGLang
# 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# hisparse-spec-adaptive.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse \
  --speculative-algorithm EAGLE --speculative-adaptive --port 30001 &
