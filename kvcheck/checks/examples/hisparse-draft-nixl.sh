# example: hisparse-draft-nixl error
# run: kvcheck preflight -f hisparse-draft-nixl.sh --sglang-version 0.5.23 --gpu h100
# A HiSparse decode with an MTP draft: DecodePreallocQueue.pop_preallocated sends the draft's
# device page ids, which only the Mooncake connector implements (NotImplementedError on NIXL).
M=deepseek-ai/DeepSeek-V3.2
SPEC="--speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
python3 -m sglang.launch_server --model-path $M --tp-size 8 --kv-cache-dtype bfloat16 $SPEC \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --port 30000 &
python3 -m sglang.launch_server --model-path $M --tp-size 8 --kv-cache-dtype bfloat16 $SPEC \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 \
  --enable-hisparse &
