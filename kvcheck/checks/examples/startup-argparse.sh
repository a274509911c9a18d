# example: startup-argparse error
# also: pair-not-checked info
# run: kvcheck preflight -f startup-argparse.sh --sglang-version 0.5.23 --gpu h100
# SGLang 0.5.23's argument parser finds --cuda-graph-max-bs ambiguous (an abbreviation of
# more than one of its flags): the prefill exits while parsing its flags.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode prefill --disaggregation-transfer-backend nixl --page-size 16 \
  --cuda-graph-max-bs 128 --port 30000 &
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --disaggregation-mode decode --disaggregation-transfer-backend nixl --page-size 16 --port 30001 &
