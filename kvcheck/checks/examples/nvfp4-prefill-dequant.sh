# example: nvfp4-prefill-dequant error
# run: kvcheck preflight -f nvfp4-prefill-dequant.sh --sglang-version 0.5.23 --gpu b200
# The decode refuses to start (--kv-cache-dtype nvfp4 with an attention backend (or
# dequant dtype) NVFP4 prefill/decode cannot use); SGLang 0.5.23's own start-up refuses
# these flags in tests/test_startup.py's case nvfp4-deepseek-blackwell.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --kv-cache-dtype nvfp4 \
  --port 30001 &
