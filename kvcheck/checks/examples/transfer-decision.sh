# example: region-count error
# run: kvcheck preflight -f transfer-decision.sh --sglang-version 0.5.23 --gpu h100
# The prefill drafts with MTP (one draft KV region after the target's), the decode does not:
# the prefill's NIXL bootstrap thread rejects a decode that registers fewer KV regions.
M=deepseek-ai/DeepSeek-V3
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --port 30000 \
  --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2 &
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 &
