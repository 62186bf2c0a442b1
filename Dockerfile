# The Kiln service image: the API (`kiln serve`) and the workers (`kiln worker`) run from this one image.
# A C linker (gcc) and libgomp are needed at compile time to link each model's shared library; the AArch64
# cross toolchain links Arm artifacts and qemu-user runs them, so they are validated like native ones.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 \
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 kiln

WORKDIR /app
COPY pyproject.toml README.md ./
COPY core core
COPY cli cli
COPY service service
COPY workers workers
COPY web web
# Editable, so that the web UI (web/) is served from /app next to the code.
RUN pip install --no-cache-dir -e '.[postgres]'

USER kiln
ENV KILN_DATA_DIR=/data \
    PYTHONUNBUFFERED=1
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/v1/health')"
# One container with an embedded worker; docker-compose.yml runs api and workers separately.
CMD ["kiln", "serve", "--host", "0.0.0.0", "--port", "8000"]
