# Written for kvcheck's tests in the shape of Dynamo launch scripts whose server args
# live in a config file baked into the image.
exec python3 -m dynamo.sglang --config /etc/sglang/prefill.yaml --disaggregation-transfer-backend nixl &
exec python3 -m dynamo.sglang --config /etc/sglang/decode.yaml --disaggregation-transfer-backend nixl
