# example: release-window unchecked
# run: kvcheck preflight -f release-window.sh --gpu h100
# No release pinned (no image tag, no --sglang-version): the pair is decided on every release
# its flags allow. Decode DCP is checked by the prefill from SGLang 0.5.17 only, so the
# answers differ across the window and the pair is unchecked, with a per-release table.
M=deepseek-ai/DeepSeek-V3
python3 -m sglang.launch_server --model-path $M --tp-size 8 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --port 30000 &
python3 -m sglang.launch_server --model-path $M --tp-size 8 --dcp-size 2 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --port 30001 &
