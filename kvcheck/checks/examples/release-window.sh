# example: release-window unchecked
# run: kvcheck preflight -f release-window.sh --gpu h100
# No release pinned (no image tag, no --sglang-version): the pair is decided on every release
# whose parser takes its flags (--dcp-size: 0.5.15 on). A 0.5.15 or 0.5.16 prefill does not
# read the decode's DCP size (unchecked there); 0.5.22 and 0.5.23 pass. The answers differ,
# so the pair is unchecked, with a per-release table. (Pin the release to decide it.)
M=deepseek-ai/DeepSeek-V3
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --port 30000 &
python3 -m sglang.launch_server --model-path $M --tp-size 8 --dcp-size 2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 &
