# example: startup-unchecked unchecked
# also: connector-startup unchecked, release-pd-unchecked unchecked
# run: kvcheck preflight -f startup-unchecked.sh --sglang-version 0.5.4 --gpu h100
# SGLang 0.5.4: kvcheck reads its flags but has not measured its start-up refusals against
# that release's own prepare_server_args (start-up is verified from 0.5.5), so whether
# each server accepts them is not predicted: unchecked, never another release's answer.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
