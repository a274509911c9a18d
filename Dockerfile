# The kvcheck image: the static preflight and the live checks, no GPU, no SGLang/torch
# (the builtin decision kernel). Build it from the root of this repository:
#
#   docker build -t ghcr.io/your-org/kvcheck:0.2.0 .
#   docker push ghcr.io/your-org/kvcheck:0.2.0
#   docker run --rm -v "$PWD:/work:ro" ghcr.io/your-org/kvcheck:0.2.0 preflight -f configs/deployments/llama-nixl-1p2d.yaml
#
# configs/k8s/ and configs/ci/ refer to this image by that name: replace your-org with
# your registry. It runs as user 10001 (numeric, so Kubernetes can verify runAsNonRoot)
# and writes nothing, so readOnlyRootFilesystem: true works.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kvcheck ./kvcheck
RUN python -m pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kvcheck
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /work
USER 10001:10001
ENTRYPOINT ["kvcheck"]
CMD ["--help"]
