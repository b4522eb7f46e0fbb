"""The scale-out recipes, checked as far as a machine without a Docker daemon or a
cluster allows: the Docker and Kubernetes work pools' job templates
(deploy/*-pool.json) are accepted by a real Prefect API, rendered for a flow run
exactly as their workers render them, and the Kubernetes Job validates against
the Kubernetes schema; the Dockerfile copies what the package is made of."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path
from uuid import uuid4

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = json.loads((ROOT / "deploy/docker-pool.json").read_text())
KUBERNETES = json.loads((ROOT / "deploy/kubernetes-pool.json").read_text())


def _flow_run():
    from prefect.client.schemas.objects import FlowRun

    return FlowRun(id=uuid4(), flow_id=uuid4(), name="brave-otter", parameters={"cfg": {"episodes": 4}})


@pytest.mark.parametrize("kind, template", [("docker", DOCKER), ("kubernetes", KUBERNETES)])
def test_the_api_accepts_the_pool_templates(prefect_api, kind, template):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    with get_client(sync_client=True) as client:
        pool = client.create_work_pool(WorkPoolCreate(name=f"ludic-{kind}-{uuid4().hex[:6]}", type=kind,
                                                      base_job_template=template))
        assert client.read_work_pool(pool.name).base_job_template == template


def test_docker_runs_the_project_image_with_runs_on_a_volume():
    from prefect_docker.worker import DockerWorkerJobConfiguration

    cfg = asyncio.run(DockerWorkerJobConfiguration.from_template_and_values(DOCKER, {}))
    run = _flow_run()
    cfg.prepare_for_flow_run(run)
    assert cfg.image == "ludic:latest" and cfg.volumes == ["ludic-runs:/runs"]
    assert cfg.container_create_kwargs == {"shm_size": "8g"} and cfg.auto_remove
    assert cfg.env["PREFECT__FLOW_RUN_ID"] == str(run.id)
    assert cfg.command == "prefect flow-run execute"
    gpu = asyncio.run(DockerWorkerJobConfiguration.from_template_and_values(DOCKER, {
        "image": "registry.example/ludic:1",
        "container_create_kwargs": {"shm_size": "16g", "device_requests": [{"count": -1, "capabilities": [["gpu"]]}]}}))
    assert gpu.image == "registry.example/ludic:1"
    assert gpu.container_create_kwargs["device_requests"][0]["capabilities"] == [["gpu"]]


def _job(values: dict, template: dict = KUBERNETES) -> dict:
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    cfg = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(template, values))
    cfg.prepare_for_flow_run(_flow_run())
    return cfg.job_manifest


@pytest.mark.parametrize("values", [{}, {"gpus": 8, "image": "registry.example/ludic:1", "runs_claim": "team-runs",
                                         "namespace": "rl", "cpu_request": "8", "memory_limit": "64Gi"}])
def test_kubernetes_renders_a_valid_gpu_job(values):
    import kubernetes_validate

    job = _job(values)
    kubernetes_validate.validate(job, "1.31", strict=True)  # raises naming the offending field
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == values.get("gpus", 1)
    assert container["image"] == values.get("image", "ludic:latest")
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/runs", "/dev/shm"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == values.get("runs_claim", "ludic-runs")
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert any(e["name"] == "PREFECT__FLOW_RUN_ID" for e in container["env"])


def test_a_broken_job_is_refused_by_the_schema():
    """The validation above can fail: Prefect's own default template puts `completions`
    and `parallelism` in the pod spec (ours moves them to the Job's), and a GPU count
    that is not a quantity is refused."""
    import kubernetes_validate
    from prefect_kubernetes.worker import KubernetesWorker

    default = _job({"image": "ludic:latest"}, KubernetesWorker.get_default_base_job_template())
    assert "completions" in default["spec"]["template"]["spec"]
    with pytest.raises(kubernetes_validate.ValidationError, match="completions"):
        kubernetes_validate.validate(default, "1.31", strict=True)
    import kubernetes_validate

    job = _job({})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = ["one"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.31", strict=True)


def test_the_dockerfile_copies_every_package_of_the_project():
    text = (ROOT / "Dockerfile").read_text()
    copied = {src for line in re.findall(r"^COPY (.+)$", text, re.M) for src in line.split()[:-1]}
    assert all((ROOT / src).exists() for src in copied), copied
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= copied
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"docker", "kubernetes"} <= set(extras) and 'pip install --no-cache-dir -e ".[docker,kubernetes]"' in text
    assert "ln -s /runs runs" in text  # the pools mount their volume at /runs


def test_a_deployment_moves_to_the_docker_pool_with_its_image(prefect_api, tmp_path):
    """The README's recipe: `prefect deploy --name NAME --pool POOL --job-variable image=...`
    (options apply to one deployment at a time; `--all` ignores them)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL
    from prefect_docker.worker import DockerWorkerJobConfiguration

    from tests.prefect_layer.stack import PREFECT, _run, base_env

    pool = f"ludic-docker-{uuid4().hex[:6]}"
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type="docker", base_job_template=DOCKER))
        _run([*PREFECT, "--no-prompt", "deploy", "--name", "evaluate", "--pool", pool,
              "--job-variable", "image=registry.example/ludic:7"],
             base_env(PREFECT_API_URL.value(), tmp_path / "home"), timeout=180)
        deployment = client.read_deployment_by_name("evaluate/evaluate")
    assert deployment.work_pool_name == pool
    cfg = asyncio.run(DockerWorkerJobConfiguration.from_template_and_values(DOCKER, deployment.job_variables))
    assert cfg.image == "registry.example/ludic:7" and cfg.volumes == ["ludic-runs:/runs"]
