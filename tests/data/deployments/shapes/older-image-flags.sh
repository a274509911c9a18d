# Written for kvcheck's tests: a launch script that installs SGLang 0.4.9.post3, whose decode
# uses --enable-flashinfer-moe (a flag of 0.4.8-0.4.9.post4 only; every release kvcheck has tables for refuses it).
pip install "sglang[all]==0.4.9.post3"
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill \
  --disaggregation-transfer-backend nixl --page-size 16 --port 30000 &
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode decode \
  --disaggregation-transfer-backend nixl --page-size 16 --port 30001 --enable-flashinfer-moe
