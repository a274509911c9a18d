# example: decode-host-receive-retraction error
# run: kvcheck preflight -f decode-host-receive-retraction.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (decode host receive with
# --disaggregation-decode-retraction-backup cpu_tensor); SGLang 0.5.23's own start-up
# refuses these flags in tests/test_startup.py's case host-receive-cpu-tensor.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl \
  --disaggregation-decode-host-receive-threshold 0.5 --disaggregation-decode-retraction-backup \
  cpu_tensor --port 30001 &
