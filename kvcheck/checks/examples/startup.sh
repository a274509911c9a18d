# example: tp-attn-dp-cp error
# run: kvcheck preflight -f startup.sh --sglang-version 0.5.23 --gpu h100
# ServerArgs refuses a --tp-size that attention DP does not divide, before it loads the model.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --tp-size 2 --enable-dp-attention --dp-size 4 &
