# example: unknown-model unchecked
# run: kvcheck preflight -f unknown-model.sh --sglang-version 0.5.23 --gpu h100
# A hub id that is not local, in no Hugging Face cache and not in kvcheck's catalog: the KV
# regions depend on the model's layers, heads and dtypes. (Pass --model-config FILE.)
M=example-org/in-house-model-7b
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
