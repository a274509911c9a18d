# example: hisparse-host-as-vram error
# run: kvcheck preflight -f hisparse-host-as-vram.sh --sglang-version 0.5.14 --gpu h100
# A HiSparse decode on SGLang 0.5.14 with NIXL 1.2.0: before 0.5.15 NixlKVManager
# registers the decode's HiSparse host KV pool as VRAM, which NIXL >= 1.0.0 refuses
# (NIXL_ERR_BACKEND): the decode exits after loading the model.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype bfloat16 --port 30000 &
NIXL_VERSION=1.2.0 python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype bfloat16 --enable-hisparse --disable-radix-cache --port 30001 &
