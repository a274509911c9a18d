# example: config-refused unchecked
# run: kvcheck preflight -f config-refused.sh --sglang-version 0.5.23 --gpu h100
# The decode's --config file has a key SGLang's parser refuses (tensor-parallel-degree is no
# flag of the server; ConfigArgumentMerger hands every key to it): the server does not start
# with that file.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --config config-refused/decode-extra.yaml &
