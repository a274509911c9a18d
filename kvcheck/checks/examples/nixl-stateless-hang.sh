# example: nixl-stateless-hang error
# also: known-issue error
# run: kvcheck preflight -f nixl-stateless-hang.sh --sglang-version 0.5.12 --gpu h100
# SGLang 0.5.12's NIXL sender sends the last chunk's completion only for a request with state
# indices: every request of a model without hybrid state (Llama) hangs. Fixed in 0.5.12.post1.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
