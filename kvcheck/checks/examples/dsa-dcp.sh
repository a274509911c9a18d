# example: dsa-dcp error
# run: kvcheck preflight -f dsa-dcp.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (decode context parallelism on a DSA model with
# HiSparse/HiCache or in a PD role); SGLang 0.5.23's own start-up refuses these flags in
# tests/test_startup.py's case dsa-dcp-pd-decode.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --tp-size 2 --dcp-size 2 \
  --port 30001 &
