# syntax=docker/dockerfile:1
# One image for every sharedserve role; the Kubernetes manifests in k8s/ pick the role by command:
#   sharedserve serve ...          model server (REST 8501, gRPC 8500; the HEALTHCHECK below)
#   sharedserve allocator ...      vGPU device plugin (metrics 9400)
#   sharedserve bench / bench-worker ...   Locust master (5557) and workers
# Build: docker build -t sharedserve:0.1.0 .
# EXTRAS picks sharedserve's extras, so the frameworks the models need (comma-separated):
# tensorflow (the default), torch (TorchScript, torch.export), onnx (onnxruntime's CPU build). An
# image for ONNX models: docker build --build-arg EXTRAS=onnx -t sharedserve:0.1.0-onnx .
#
# The base: TensorFlow's GPU build as TensorFlow documents it, `tensorflow[and-cuda]` (CUDA and
# cuDNN as NVIDIA's wheels), on a pinned Python image. Not tensorflow/tensorflow:X-gpu: from 2.18
# on those images ship a system cuDNN their TensorFlow cannot load, so TensorFlow finds no GPU
# (tensorflow/tensorflow#62412, #85689, #94593), and the last one that works, 2.17, needs
# protobuf < 5 where sharedserve needs protobuf >= 7 (pyproject.toml). The host needs only the
# NVIDIA driver (CUDA 12 capable) and the NVIDIA Container Toolkit.
ARG PYTHON_VERSION=3.11.13
ARG TF_VERSION=2.21.0
ARG EXTRAS=tensorflow

# -- builder: turns the source tree into a wheel (needs the build backend, not the runtime) ------
FROM python:${PYTHON_VERSION}-slim-bookworm AS builder
ARG TF_VERSION
ARG EXTRAS
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sharedserve ./sharedserve
# The requirements file names the wheel with its extras, so the final stage needs no glob;
# TensorFlow's GPU build only where EXTRAS has tensorflow; the constraints hold TensorFlow at
# TF_VERSION. Locust and the report's plotting are core dependencies: every role is there.
RUN python3 -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && wheel="$(find /wheels -name 'sharedserve-*.whl')" \
    && printf 'sharedserve[%s] @ file://%s\n' "$EXTRAS" "$wheel" > /wheels/requirements.txt \
    && case ",$EXTRAS," in \
        *,tensorflow,*) printf 'tensorflow[and-cuda]\n' >> /wheels/requirements.txt ;; \
    esac \
    && printf 'tensorflow==%s\n' "$TF_VERSION" > /wheels/constraints.txt

# -- final: Python, sharedserve and its dependencies; no compiler ------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# HOME=/tmp: with a read-only root filesystem (as in k8s/), /tmp is the one writable path, and
# Keras and Matplotlib keep their config and caches under HOME. NVIDIA_DRIVER_CAPABILITIES: when
# the allocator grants a GPU, the NVIDIA runtime mounts the driver's CUDA library (compute) and
# NVML (utility). No NVIDIA_VISIBLE_DEVICES here: a pod sees a GPU only if it is granted one.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    TF_CPP_MIN_LOG_LEVEL=2 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HOME=/tmp
# The wheel comes in through a bind mount, so it adds no layer. --only-binary: nothing is
# compiled, and the build fails if a compiler, linker or make is on the PATH. The NVIDIA wheels'
# library directories (where EXTRAS brought any) go to the dynamic linker's configuration:
# TensorFlow's own lookup of them is not reliable in every release, and the linker's is.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python3 -m pip install --no-cache-dir --only-binary=:all: \
        -r /wheels/requirements.txt -c /wheels/constraints.txt \
    && site="$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && if [ -d "$site/nvidia" ]; then find "$site/nvidia" -mindepth 2 -maxdepth 2 -type d \
        -name lib > /etc/ld.so.conf.d/nvidia-wheels.conf; fi \
    && ldconfig \
    && if command -v gcc || command -v cc || command -v c++ || command -v ld || command -v make; \
        then echo "a compiler, linker or make is installed" >&2; exit 1; fi \
    && useradd --uid 10001 --user-group --no-log-init --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sharedserve \
    && sharedserve --help > /dev/null

# A fixed numeric UID, so Kubernetes' runAsNonRoot can verify it and the manifests can match it.
USER 10001:10001
EXPOSE 8500 8501 9400 5557
# For the server role under plain Docker: ready when the model answers its metadata (503 until it
# has loaded and warmed up), if SHAREDSERVE_MODEL_NAME names it; else alive when the REST
# listener answers. No curl in the image: Python's urllib. Kubernetes ignores HEALTHCHECK and
# uses the probes in k8s/; other roles run with --no-healthcheck.
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request as r; n = os.environ.get('SHAREDSERVE_MODEL_NAME'); p = os.environ.get('SHAREDSERVE_REST_PORT', '8501'); r.urlopen(f'http://127.0.0.1:{p}' + (f'/v1/models/{n}/metadata' if n else '/metrics'), timeout=4)"]
ENTRYPOINT ["sharedserve"]
CMD ["--help"]
