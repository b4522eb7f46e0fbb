# The project image for the Docker and Kubernetes work pools (deploy/*-pool.json).
#
#   docker build -t ludic:latest --build-arg PROJECT_DIR=$PWD .     # from the checkout you deploy from
#
# PROJECT_DIR is the checkout's path on the machine that runs `prefect deploy`: prefect.yaml's pull
# step changes to that directory, so the image keeps the project there. runs/ is a link to /runs,
# where the pools mount a volume (checkpoints outlive the container). For a GPU image pass
# --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 (and a CUDA-enabled host).
FROM python:3.11-slim

ARG PROJECT_DIR=/opt/ludic
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

# bubblewrap: the code sandbox; redis-server: pipeline_rl starts one when no RedisQueue block is named
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap redis-server \
    && rm -rf /var/lib/apt/lists/*

WORKDIR ${PROJECT_DIR}
COPY pyproject.toml README.md prefect.yaml prefect.toml ./
COPY ludic_core ludic_core
COPY flows flows
COPY tasks tasks
COPY blocks blocks
RUN pip install --no-cache-dir "${TORCH_SPEC}" --index-url "${TORCH_INDEX}" \
    && pip install --no-cache-dir -e ".[docker,kubernetes]" \
    && mkdir -p /runs && ln -s /runs runs
