# example: hisparse-decode-only-spec error
# also: hisparse-draft-nixl error
# run: kvcheck preflight -f hisparse-decode-only-spec.sh --sglang-version 0.5.23 --gpu h100
# A HiSparse decode (host-memory KV) drafting with MTP where the prefill does not: the
# prefill's NIXL decision refuses HiSparse combined with decode-only speculative decoding.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype bfloat16 --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 8 \
  --kv-cache-dtype bfloat16 --enable-hisparse --disable-radix-cache --speculative-algorithm EAGLE \
  --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2 --port \
  30001 &
