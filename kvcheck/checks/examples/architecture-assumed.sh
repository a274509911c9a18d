# example: architecture-assumed unchecked
# run: kvcheck preflight -f architecture-assumed.sh --sglang-version 0.5.23 --gpu h100
# MiMoForCausalLM is not an architecture kvcheck has verified against SGLang's pools: the
# pair is unchecked, never passed on a plain-MHA guess.
M=XiaomiMiMo/MiMo-7B-Base
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path $M \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
