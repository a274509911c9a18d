# example: speculative-params error
# run: kvcheck preflight -f speculative-params.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (explicit EAGLE parameters the runtime refuses on a DSA
# model); SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's case
# hisparse-spec-topk-dsa-backend.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse \
  --speculative-algorithm EAGLE --speculative-eagle-topk 2 --speculative-num-steps 3 \
  --speculative-num-draft-tokens 4 --port 30001 &
