"""Checkpoints round-trip every piece of training state, atomically, in one process."""

from __future__ import annotations

import json
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from ludic_core.training import checkpoint
from ludic_core.training.checkpoint import (
    complete_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
)
from ludic_core.training.checkpoint_state import rng_snapshot
from ludic_core.training.distributed import init_distributed


def _setup(model_dir):
    """Model + AdamW + LambdaLR warm-up. LambdaLR's state_dict is JSON-able as long as the
    lambdas are plain functions (it stores `None` for them; callables' __dict__ otherwise)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
    return model, opt, sched


def _batch(i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randint(4, 260, (2, 24), generator=g)


def _train(model, opt, sched, steps) -> None:
    for i in steps:
        x = _batch(i)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


@pytest.fixture
def ctx():
    return init_distributed()


def test_roundtrip_restores_model_optimizer_scheduler_and_rng(tiny_model_dir, tmp_path, ctx, monkeypatch):
    model, opt, sched = _setup(tiny_model_dir)
    _train(model, opt, sched, range(2))
    # The streams to expect continue from the states save_checkpoint captured, not from the
    # global generators after it returns: another thread of the test process (a Prefect
    # client's, say) may draw from Python's `random` while the checkpoint's files are written.
    captured = []
    monkeypatch.setattr(checkpoint, "rng_snapshot", lambda: captured.append(rng_snapshot()) or captured[-1])
    path = save_checkpoint(tmp_path, 2, model=model, optimizer=opt, scheduler=sched, ctx=ctx,
                           data_state={"cursor": 2, "epoch": 0})  # fmt: skip
    assert path == tmp_path / "step_00000002"
    version, mt, gauss = captured[0]["python"]
    stream = random.Random()
    stream.setstate((version, tuple(mt), gauss))
    generator = torch.Generator()
    generator.set_state(torch.tensor(captured[0]["torch_cpu"], dtype=torch.uint8))
    want_rand, want_random = torch.rand(5, generator=generator), stream.random()
    torch.rand(5), random.random()  # training goes on past the checkpoint: loading it must rewind both

    model2, opt2, sched2 = _setup(tiny_model_dir)
    state = load_checkpoint(tmp_path, model=model2, optimizer=opt2, scheduler=sched2, ctx=ctx)
    got_random, got_rand = random.random(), torch.rand(5)  # at once: torch's op may let other threads run
    assert got_random == want_random
    assert torch.equal(got_rand, want_rand)
    assert state["step"] == 2 and state["data"] == {"cursor": 2, "epoch": 0}
    assert _max_diff(model.state_dict(), model2.state_dict()) == 0.0
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]  # lr, betas (a tuple again), params
    for idx, st in s1["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(st[key], s2["state"][idx][key]), (idx, key)
    assert sched2.last_epoch == sched.last_epoch == 2
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_resumed_training_matches_uninterrupted(tiny_model_dir, tmp_path, ctx):
    straight, opt, sched = _setup(tiny_model_dir)
    _train(straight, opt, sched, range(4))

    first, opt1, sched1 = _setup(tiny_model_dir)
    _train(first, opt1, sched1, range(2))
    save_checkpoint(tmp_path, 2, model=first, optimizer=opt1, scheduler=sched1, ctx=ctx)
    resumed, opt2, sched2 = _setup(tiny_model_dir)
    step = load_checkpoint(tmp_path, model=resumed, optimizer=opt2, scheduler=sched2, ctx=ctx)["step"]
    _train(resumed, opt2, sched2, range(step, 4))
    assert _max_diff(straight.state_dict(), resumed.state_dict()) < 1e-6


def test_crashed_save_is_ignored_and_cleaned_and_old_ones_pruned(tiny_model_dir, tmp_path, ctx):
    stale = tmp_path / "step_00000009.tmp-deadbeef"
    (stale / "model").mkdir(parents=True)
    (stale / "model" / "model.safetensors").write_bytes(b"partial")
    (stale / "trainer_state.json").write_text(json.dumps({"step": 9}))
    assert latest_checkpoint(tmp_path) is None

    model, opt, sched = _setup(tiny_model_dir)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model=model, optimizer=opt, scheduler=sched, ctx=ctx, keep_last=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "step_00000002", "step_00000003"]
    assert (tmp_path / "latest").read_text().strip() == "step_00000003"
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000003"

    # A crash after the rename but before `latest` moved: fall back to the newest complete dir.
    (tmp_path / "latest").write_text("step_00000007\n")
    (tmp_path / "step_00000008.tmp-0badf00d").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000003"
    (tmp_path / "step_00000005" / "model").mkdir(parents=True)  # a step dir without its files: not complete
    assert complete_checkpoints(tmp_path) == [(2, tmp_path / "step_00000002"), (3, tmp_path / "step_00000003")]
    assert complete_checkpoints(tmp_path / "missing") == []


def test_missing_or_partial_checkpoint_raises(tiny_model_dir, tmp_path, ctx):
    model, opt, sched = _setup(tiny_model_dir)
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        load_checkpoint(tmp_path / "nowhere", model=model, ctx=ctx)
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, ctx=ctx)
    (path / "optimizer.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="optimizer.safetensors"):
        load_checkpoint(path, model=model, optimizer=opt, ctx=ctx)


def test_checkpoint_of_another_model_is_refused_before_loading(tiny_model_dir, tmp_path, ctx):
    model, opt, sched = _setup(tiny_model_dir)
    save_checkpoint(tmp_path, 1, model=model, optimizer=opt, scheduler=sched, ctx=ctx)
    config = LlamaConfig.from_pretrained(tiny_model_dir)
    config.hidden_size, config.intermediate_size = 64, 192
    other = LlamaForCausalLM(config)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ValueError, match=r"'lm_head.weight'.*\[260, 128\].*\[260, 64\]"):
        load_checkpoint(tmp_path, model=other, optimizer=torch.optim.AdamW(other.parameters()), ctx=ctx)
    assert _max_diff(before, other.state_dict()) == 0.0


def test_saved_model_dir_is_a_plain_hf_model(tiny_model_dir, tmp_path, ctx):
    model, opt, sched = _setup(tiny_model_dir)
    _train(model, opt, sched, range(1))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, scheduler=sched, ctx=ctx, tokenizer=tok)
    reloaded = AutoModelForCausalLM.from_pretrained(path / "model")
    assert reloaded.config.architectures == ["LlamaForCausalLM"]
    assert _max_diff(model.state_dict(), reloaded.state_dict()) == 0.0
    assert _max_diff(model.state_dict(), load_model_weights(path)) == 0.0
    assert AutoTokenizer.from_pretrained(path / "model").encode("hi") == tok.encode("hi")
    assert not any(p.suffix in {".pt", ".bin", ".pkl"} for p in path.rglob("*"))
