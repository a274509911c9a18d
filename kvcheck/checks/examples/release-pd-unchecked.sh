# example: release-pd-unchecked unchecked
# run: kvcheck preflight -f release-pd-unchecked.sh --sglang-version 0.5.14 --gpu h100
# A prefill with PP 2 on SGLang 0.5.14: its registration decision pairs each PP stage's
# regions positionally from the decode's layer 0, a transfer kvcheck does not restate.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --pp-size 2 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
