# Written for kvcheck's tests: both servers load /model (a path inside the image) and name the
# model with --served-model-name; no release is pinned, and only the decode uses a flag that
# newer releases refuse (--cuda-graph-bs is ambiguous from 0.5.20), so the two sides' windows
# end at different releases.
python3 -m sglang.launch_server --model-path /model --served-model-name Qwen/Qwen3-8B \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path /model --served-model-name Qwen/Qwen3-8B \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --cuda-graph-bs 256
