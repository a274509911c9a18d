# example: servers-not-read unchecked
# run: kvcheck preflight -f servers-not-read.sh --sglang-version 0.5.23 --gpu h100
# No launch line in this file: the servers are started by functions of common.sh, which is
# not beside it. Those servers are not checked (never "no launch line, nothing to do").
source ./common.sh
start_prefill --tp-size 2
start_decode --tp-size 2
