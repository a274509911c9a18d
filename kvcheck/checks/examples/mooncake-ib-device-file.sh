# example: mooncake-ib-device-file warning
# run: kvcheck preflight -f mooncake-ib-device-file.sh --sglang-version 0.5.23 --gpu h100
# --disaggregation-ib-device names a JSON file on the server's disk: kvcheck cannot read
# it to check that it maps every GPU the server uses.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend mooncake --page-size 16 \
  --disaggregation-ib-device /etc/mooncake/ib.json --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend mooncake --page-size 16 --port \
  30001 &
