# example: conditional-branches unchecked
# run: kvcheck preflight -f conditional-branches.sh --sglang-version 0.5.23 --gpu h100
# Seven independent if blocks give 128 combinations of the servers' flags; kvcheck reads the
# first 64 and says the others are not checked.
EXTRA=""
if [ "$OPT1" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 1024"; fi
if [ "$OPT2" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 2048"; fi
if [ "$OPT3" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 3072"; fi
if [ "$OPT4" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 4096"; fi
if [ "$OPT5" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 5120"; fi
if [ "$OPT6" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 6144"; fi
if [ "$OPT7" = 1 ]; then EXTRA="$EXTRA --chunked-prefill-size 7168"; fi
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 $EXTRA &
