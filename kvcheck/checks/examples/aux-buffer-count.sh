# example: aux-buffer-count error
# run: kvcheck preflight -f aux-buffer-count.sh --sglang-version 0.5.23 --gpu h100
# MetadataBuffers (0.5.23) pair up by position; SGLANG_ENABLE_DISAGG_SAMPLING_MASK on the
# prefill only inserts three buffers in the middle and shifts every later one.
SGLANG_ENABLE_DISAGG_SAMPLING_MASK=1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
