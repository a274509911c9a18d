# example: pp-speculative error
# run: kvcheck preflight -f pp-speculative.sh --sglang-version 0.5.23 --gpu h100
# The decode refuses to start (pipeline parallelism with speculative decoding outside a PD
# prefill (or with a non-EAGLE algorithm)); SGLang 0.5.23's own start-up refuses these
# flags in tests/test_startup.py's case pp-mtp-decode.
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --pp-size 2 \
  --speculative-algorithm NEXTN --speculative-num-steps 1 --speculative-eagle-topk 1 \
  --speculative-num-draft-tokens 2 --port 30001 &
