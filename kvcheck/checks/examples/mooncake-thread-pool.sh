# example: mooncake-thread-pool error
# run: kvcheck preflight -f mooncake-thread-pool.sh --sglang-version 0.5.23 --gpu h100
# A Mooncake prefill whose transfer thread pool (2) is smaller than its number of transfer
# queues (SGLANG_DISAGGREGATION_QUEUE_SIZE, 4): MooncakeKVManager.__init__ asserts at
# start-up.
SGLANG_DISAGGREGATION_THREAD_POOL_SIZE=2 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
