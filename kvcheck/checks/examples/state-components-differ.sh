# example: state-components-differ unchecked
# also: kv-cache-dtype-mismatch error, state-components unchecked
# run: kvcheck preflight -f state-components-differ.sh --sglang-version 0.5.23 --gpu b200
# An MXFP8 KV cache registers its block scales as a state component; an fp8_e4m3 decode
# registers none. NixlKVManager.maybe_send_extra pairs state components by index, and
# kvcheck does not predict what it does with unequal lists. (The decode's dtype check also
# refuses this pair: kv-cache-dtype-mismatch.)
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 \
  --kv-cache-dtype mxfp8 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --kv-cache-dtype fp8_e4m3 &
