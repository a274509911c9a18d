# example: config-not-read unchecked
# run: kvcheck preflight -f config-not-read.sh --sglang-version 0.5.23 --gpu h100
# The decode takes more server args from a --config file inside the image: they are unknown
# here, so that server is not checked. (Give kvcheck a copy with
# --config-file /etc/sglang/decode-extra.yaml=LOCAL_PATH.)
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 \
  --config /etc/sglang/decode-extra.yaml &
