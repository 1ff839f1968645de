# The egress proxy's image (infra/cdk/constructs/egress_proxy.py builds it at `cdk deploy`, with
# Docker or Finch). Its build context is the repository filtered to the proxy package,
# sandbox_common and this file: nothing else is sent to the builder or changes the asset hash.
FROM public.ecr.aws/docker/library/python:3.13.9-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    HOME=/tmp

WORKDIR /app
# The proxy's requirements, every transitive dependency pinned (binary wheels exist for every one
# on linux/arm64 and linux/amd64), installed before the code so a code change rebuilds one layer.
COPY functions/egress_proxy/requirements.txt /app/requirements.txt
RUN pip install --no-compile --no-deps --only-binary=:all: -r /app/requirements.txt && pip check

COPY layers/common/python/sandbox_common /app/sandbox_common
COPY functions/egress_proxy /app/egress_proxy

# No root, no writable root file system (the task mounts /tmp): the CA is written there at start.
# The task definition gives the arguments (infra/cdk/function_env.py: proxy_command).
USER 10001:10001
ENTRYPOINT ["python", "-m", "egress_proxy"]
