export A="${B}"
export B="${A}"
python3 -m sglang.launch_server --model-path $A --disaggregation-mode prefill
