# example: decode-host-receive-hisparse error
# run: kvcheck preflight -f decode-host-receive-hisparse.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (decode host receive
# (--disaggregation-decode-host-receive-threshold < 1) with HiSparse or PD role
# switching); SGLang 0.5.23's own start-up refuses these flags in tests/test_startup.py's
# case host-receive-hisparse.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --enable-hisparse \
  --disaggregation-decode-host-receive-threshold 0.5 --port 30001 &
