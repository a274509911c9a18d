# example: dcp-size error
# run: kvcheck preflight -f dcp-size.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (an invalid --dcp-size); SGLang 0.5.23's own start-up
# refuses these flags in tests/test_startup.py's case dcp-size-zero.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --dcp-size 0 --port 30001 &
