# example: prefill-dcp-warning warning
# run: kvcheck preflight -f prefill-dcp-warning.sh --sglang-version 0.5.23 --gpu h100
# DCP on a PD prefill: handle_pd_disaggregation warns that it usually adds communication
# overhead without improving prefill performance.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 64 --tp-size 2 \
  --dcp-size 2 --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 64 --tp-size 2 \
  --dcp-size 2 --port 30001 &
