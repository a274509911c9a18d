python -m sglang.launch_server --model-path m --disaggregation-mode prefill --config ../../../../etc/passwd
python -m sglang.launch_server --model-path m --disaggregation-mode decode --port 1
