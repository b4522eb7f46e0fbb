"""FSDP2 on 2 CPU ranks (gloo) gives the 1-process result, and checkpoints cross world sizes.

The reference runs in this process through the same code (`_worker_fsdp.py`), where
every helper degrades to its single-process no-op. Tolerances: summing in another
order changes gradients by float round-off, which Adam turns into ~1e-7 weight
differences here (eps=1e-6; with the default 1e-8 it amplifies near-zero
gradients, and merely reordering one process's batch already moves weights ~5e-6).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ludic_core.device import resolve_device
from ludic_core.training.checkpoint import load_model_weights, save_checkpoint
from ludic_core.training.distributed import (
    DistContext,
    all_gather_json,
    all_reduce_sum,
    barrier,
    broadcast_object_json,
    full_state_dict,
    init_distributed,
    set_gradient_sync,
    shard_batch,
    shard_model,
)

WORKER = Path(__file__).with_name("_worker_fsdp.py")
REPO = Path(__file__).resolve().parents[2]


def _worker_module():
    spec = importlib.util.spec_from_file_location("_worker_fsdp", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchrun(*args: str, device: str = "cpu") -> None:
    paths = [str(REPO), os.environ.get("PYTHONPATH")]  # the caller's path too (packages installed with --target)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, paths)), "LUDIC_DEVICE": device}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), *args]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"torchrun failed:\n{(proc.stdout + proc.stderr)[-20000:]}"


def _max_diff(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> float:
    assert ref.keys() == got.keys()
    return max((ref[k] - got[k]).abs().max().item() for k in ref)


def _assert_optimizer_matches(model, opt, saved: Path, step: int) -> None:
    """The 2-rank save gathered the full optimizer state, keyed by parameter name."""
    optim = load_file(saved / "optimizer.safetensors")
    for name, p in model.named_parameters():
        for key in ("exp_avg", "exp_avg_sq"):
            want, got = opt.state[p][key], optim[f"state.{name}.{key}"]
            rel = ((want - got).abs().max() / want.abs().max()).item()
            assert rel < 1e-3, (name, key, rel)  # a world-size scale error would be >= 0.5
        assert optim[f"state.{name}.step"].item() == step


def test_single_process_helpers_are_no_ops():
    ctx = init_distributed()
    assert ctx == DistContext(0, 1, 0, resolve_device("auto")) and ctx.is_main and not ctx.is_distributed
    assert init_distributed() == ctx
    assert init_distributed("cpu").device == torch.device("cpu")
    assert all_reduce_sum(2.5, ctx) == 2.5
    assert broadcast_object_json({"a": [1, "x"]}, ctx) == {"a": [1, "x"]}
    assert all_gather_json({"r": 0}, ctx) == [{"r": 0}]
    barrier(ctx)
    model = torch.nn.Linear(3, 2)
    assert shard_model(model, ctx) is model
    set_gradient_sync(model, False)
    sd = full_state_dict(model, ctx)
    assert torch.equal(sd["weight"], model.weight) and sd["weight"].data_ptr() != model.weight.data_ptr()


def test_shard_batch_is_contiguous_and_balanced():
    items = list(range(11))
    parts = [shard_batch(items, DistContext(r, 3, r, torch.device("cpu"))) for r in range(3)]
    assert parts == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    assert shard_batch([1], DistContext(1, 2, 1, torch.device("cpu"))) == []


@pytest.mark.slow
def test_fsdp2_two_ranks_match_one_process(tiny_model_dir, tmp_path, rank_device):
    _torchrun("train", str(tiny_model_dir), str(tmp_path / "fsdp"), device=rank_device)
    saved = tmp_path / "fsdp" / "step_00000002"
    w = _worker_module()
    ctx = init_distributed()
    model, opt, sched = w.make_training(tiny_model_dir, ctx)
    w.train_steps(model, opt, sched, ctx, range(2))

    diff = _max_diff(model.state_dict(), load_model_weights(saved))
    print(f"\nFSDP2 2-rank vs 1-process max abs weight diff after 2 steps: {diff:.3e}")
    assert diff < 1e-5
    # exp_avg is linear in the gradient, so unlike Adam's update it exposes a gradient
    # scaled by the world size (sum vs average mix-ups).
    _assert_optimizer_matches(model, opt, saved, step=2)
    rng_keys = set(load_file(saved / "rng.safetensors"))
    assert {"rank.0.torch_cpu", "rank.1.torch_cpu"} <= rng_keys


@pytest.mark.slow
def test_one_process_checkpoint_resumes_on_two_ranks(tiny_model_dir, tmp_path, rank_device):
    w = _worker_module()
    ctx = init_distributed()
    model, opt, sched = w.make_training(tiny_model_dir, ctx)
    w.train_steps(model, opt, sched, ctx, range(2))
    save_checkpoint(tmp_path / "single", 2, model=model, optimizer=opt, scheduler=sched, ctx=ctx)

    _torchrun("resume", str(tiny_model_dir), str(tmp_path / "fsdp"), str(tmp_path / "single"), device=rank_device)
    w.train_steps(model, opt, sched, ctx, range(2, 3))
    saved = tmp_path / "fsdp" / "step_00000003"
    diff = _max_diff(model.state_dict(), load_model_weights(saved))
    print(f"\n1-process ckpt -> 2-rank FSDP2 resume vs 1-process continuation, max abs diff: {diff:.3e}")
    assert diff < 1e-5

    _assert_optimizer_matches(model, opt, saved, step=3)
