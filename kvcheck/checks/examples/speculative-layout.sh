# example: speculative-layout info
# run: kvcheck preflight -f speculative-layout.sh --sglang-version 0.5.23 --gpu h100
# Decode-only MTP drafting on DeepSeek V3: the decode appends its draft KV region after the
# target's, and the prefill pairs its regions with the decode's first ones.
M=deepseek-ai/DeepSeek-V3
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --port 30000 &
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 \
  --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2 &
