# example: known-issue error
# run: kvcheck preflight -f known-issue.sh --sglang-version 0.5.23 --gpu h100
# From SGLang 0.5.15 the NIXL connector imports nixl_thread_sync_t, which NIXL 1.1.0 added
# (known_issues.yaml sglang-0.5.15-needs-nixl-1.1): a server whose image ships NIXL 1.0.0
# stops at start-up.
NIXL_VERSION=1.0.0 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
NIXL_VERSION=1.0.0 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
