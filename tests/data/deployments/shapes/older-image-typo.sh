# Written for kvcheck's tests: the same script on SGLang 0.4.9.post3 with a typo no release
# registers (--page-sise), and a line continuation that glues a stray word on (OME v0.1.2's
# `"$MODEL_PATH"\` shape): both refused whatever the release.
pip install "sglang[all]==0.4.9.post3"
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --disaggregation-mode prefill \
  --disaggregation-transfer-backend nixl --page-sise 16 --port 30000 &
python3 -m sglang.launch_server --model-path="Qwen/Qwen3-8B"\
--tp-size 1 --disaggregation-mode decode \
  --disaggregation-transfer-backend nixl --page-size 16 --port 30001
