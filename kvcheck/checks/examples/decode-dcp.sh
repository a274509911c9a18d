# example: decode-dcp error
# also: dcp-topology error
# run: kvcheck preflight -f decode-dcp.sh --sglang-version 0.5.23 --gpu h100
# Decode context parallelism on an MHA model: the decode's bootstrap check allows decode
# DCP only for MLA models.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --tp-size 2 \
  --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --tp-size 2 \
  --dcp-size 2 --port 30001 &
