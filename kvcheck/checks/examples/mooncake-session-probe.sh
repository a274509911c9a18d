# example: mooncake-session-probe error
# run: kvcheck preflight -f mooncake-session-probe.sh --sglang-version 0.5.23 --gpu h100
# The failed-session probe (0.5.23) with a probe interval over its cap
# (SGLANG_FAILED_SESSION_PROBE_MAX_INTERVAL_S, 60 s by default): the prefill's transfer
# engine refuses at start-up.
SGLANG_ENABLE_FAILED_SESSION_PROBE=1 SGLANG_FAILED_SESSION_PROBE_INTERVAL_S=120 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
