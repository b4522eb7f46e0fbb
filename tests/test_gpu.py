"""CUDA paths, run on a GPU machine (`pytest -m gpu`, or the whole suite with `--device cuda`).

Skipped where torch sees no GPU (conftest). The rest of the suite covers the
same logic on the CPU; these pin what only a GPU shows: the model meeting its
device, decoding on it, and NCCL ranks.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ludic_core.algorithms import make_sft
from ludic_core.batching.sources import OfflineBatchSource
from ludic_core.config import TrainerConfig
from ludic_core.inference import ChatCompletionRequest, LocalChatClient, SamplingConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.trainer import Trainer

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_trainer_step_on_cuda_from_a_cpu_loaded_model(tiny_model_dir, sft_items, dtype):
    model, tok = load_model_and_tokenizer(tiny_model_dir)  # on the CPU, as the README loads it
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tr = Trainer(model, make_sft(), OfflineBatchSource(sft_items, batch_size=8), TrainerConfig(
        device="cuda", dtype=dtype, lr=3e-3), tokenizer=tok)
    assert tr.ctx.device.type == "cuda" and next(tr.model.parameters()).is_cuda
    hist = tr.train(3)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in hist)
    after = tr.model.state_dict()
    assert max(float((after[k].cpu() - before[k]).abs().max()) for k in before) > 1e-4


def test_a_model_already_on_a_gpu_stays_there_under_auto(tiny_model_dir, sft_items):
    target = torch.device("cuda", torch.cuda.device_count() - 1)
    model, tok = load_model_and_tokenizer(tiny_model_dir, device=str(target))
    tr = Trainer(model, make_sft(), OfflineBatchSource(sft_items, batch_size=4), TrainerConfig(), tokenizer=tok)
    assert tr.ctx.device == target and next(tr.model.parameters()).device == target
    tr.train(1)
    client = LocalChatClient(model, tok)
    assert client.model.device == target


def _complete(client, seeds, temperature):
    reqs = [ChatCompletionRequest(messages=[{"role": "user", "content": f"prompt {s}"}],
                                  sampling=SamplingConfig(temperature=temperature, max_tokens=24, seed=s))
            for s in seeds]

    async def run():
        return await asyncio.gather(*[client.complete(r) for r in reqs])

    return [resp for resp, _ in asyncio.run(run())]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_local_client_on_cuda_is_exact_in_fp32_and_matches_cpu_samples(tiny_model_dir, teacher_logprobs,
                                                                      temperature):
    gpu = LocalChatClient(tiny_model_dir, device="cuda", dtype="float32")
    cpu = LocalChatClient(tiny_model_dir, device="cpu", dtype="float32")
    on_gpu, on_cpu = _complete(gpu, range(8), temperature), _complete(cpu, range(8), temperature)
    worst = 0.0
    for resp in on_gpu:
        ref = teacher_logprobs(gpu.model, resp, temperature)
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, resp.completion_logprobs)))
    assert worst < 1e-4, worst
    # counter-based noise is device-independent: the same seeds draw the same tokens
    same = sum(a.completion_token_ids == b.completion_token_ids for a, b in zip(on_gpu, on_cpu))
    assert same >= 7, same
    again = _complete(gpu, range(8), temperature)
    assert [r.completion_token_ids for r in again] == [r.completion_token_ids for r in on_gpu]


def test_fsdp2_on_nccl_matches_one_gpu(tiny_model_dir, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("FSDP2 on NCCL needs >= 2 GPUs (one GPU cannot hold two NCCL ranks)")
    worker = ROOT / "tests" / "training" / "_worker_resume.py"
    env = {**os.environ, "LUDIC_DEVICE": "cuda"}

    def run(ckpt: Path, nproc: int) -> None:
        launcher = [sys.executable] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run",
                                                        "--standalone", f"--nproc_per_node={nproc}"]
        proc = subprocess.run([*launcher, str(worker), str(tiny_model_dir), str(ckpt), "3"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]

    run(tmp_path / "one", 1)
    run(tmp_path / "two", 2)
    from safetensors.torch import load_file

    a = load_file(tmp_path / "one" / "step_00000003" / "model" / "model.safetensors")
    b = load_file(tmp_path / "two" / "step_00000003" / "model" / "model.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4
