# example: dp-rank-mapping error
# run: kvcheck preflight -f dp-rank-mapping.sh --sglang-version 0.5.23 --gpu h100
# The decode sets SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1, so it asks the
# prefill's bootstrap server for each request's DP rank; the DP 2 prefill balances by
# follow_bootstrap_room and never registers one: requests wait until the bootstrap timeout.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 --tp-size 2 --dp-size 2 --enable-dp-attention &
SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
