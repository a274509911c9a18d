#!/bin/bash
# Written for kvcheck's tests: one script per node, the role picked by a condition.
ROLE=${ROLE:-prefill}
if [ "$ROLE" = "prefill" ]; then
  MODE=prefill
  TP=2
elif [ "$ROLE" = "decode" ]; then
  MODE=decode
  TP=4
else
  echo "ROLE must be prefill or decode" >&2
  exit 1
fi
python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size $TP \
  --disaggregation-mode $MODE --page-size 16 --port 30000
