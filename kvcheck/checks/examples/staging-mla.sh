# example: staging-mla error
# run: kvcheck preflight -f staging-mla.sh --sglang-version 0.5.23 --gpu h100
# SGLANG_DISAGG_STAGING_BUFFER on an MLA model: the PD queue refuses staging buffers for
# MLA KV after loading the model.
SGLANG_DISAGG_STAGING_BUFFER=true python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --port 30001 &
