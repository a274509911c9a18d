# example: registration-frames error
# run: kvcheck preflight -f registration-frames.sh --prefill-sglang-version 0.5.8 --decode-sglang-version 0.5.23 --gpu h100
# The 0.5.8 prefill reads gpu_id at frame 7 of the decode's KVArgsRegisterInfo; from 0.5.9
# the decode sends state pointers there (b''), and int(b'') kills the bootstrap thread.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
