# example: follow-bootstrap-room-plain-dp error
# run: kvcheck preflight -f follow-bootstrap-room-plain-dp.sh --sglang-version 0.5.23 --gpu h100
# A prefill with two plain DP replicas (--dp-size 2, no attention DP) routes by
# follow_bootstrap_room, but every replica's attention DP rank is 0: CommonKVSender fails
# the requests sent to replica 1 ('follow_bootstrap_room conflict').
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --dp-size 2 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
