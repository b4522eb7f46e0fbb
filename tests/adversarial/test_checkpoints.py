"""Hostile checkpoints: every damaged file is caught, named, and the run falls back.

Issue 54 found that 100 bytes of 0xFF in a checkpoint's weights loaded silently
as NaN parameters, that a garbled file failed with a message naming no file, and
that nothing fell back to the previous checkpoint. Here real checkpoints of the
tiny demo model (written by `save_checkpoint`, no mocks) are damaged file by
file, three ways each (`MATRIX`), and loading the run's root must name the file
and the checkpoint, then resume from the previous intact one.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from ludic_core.training.checkpoint import load_checkpoint, save_checkpoint
from ludic_core.training.distributed import init_distributed

STEP1, STEP2 = "step_00000001", "step_00000002"
#: every file of a full fine-tune's checkpoint (tokenizer included), the manifest last
FILES = ("model/model.safetensors", "model/config.json", "model/tokenizer.json", "optimizer.safetensors",
         "optimizer.json", "scheduler.json", "rng.safetensors", "trainer_state.json", "manifest.json")
MODES = ("truncated", "garbled", "bit_flipped")
MATRIX = [(f, m) for f in FILES for m in MODES]


def _setup(model_dir: Path):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return model, opt, sched


def _step(model, opt, sched, seed: int) -> None:
    x = torch.randint(4, 260, (2, 16), generator=torch.Generator().manual_seed(seed))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


@pytest.fixture(scope="module")
def pristine(tiny_model_dir, tmp_path_factory) -> Path:
    """A run root holding two intact checkpoints (steps 1 and 2) of the demo's tiny model."""
    root = tmp_path_factory.mktemp("pristine") / "ckpt"
    model, opt, sched = _setup(tiny_model_dir)
    tok, ctx = AutoTokenizer.from_pretrained(tiny_model_dir), init_distributed()
    for step in (1, 2):
        _step(model, opt, sched, step)
        save_checkpoint(root, step, model=model, optimizer=opt, scheduler=sched, ctx=ctx, tokenizer=tok,
                        data_state={"cursor": step}, keep_last=None)
    return root


@pytest.fixture(scope="module")
def fresh(tiny_model_dir):
    """One model + optimizer + scheduler that every case loads into (a load overwrites them)."""
    return _setup(tiny_model_dir)


@pytest.fixture
def run(pristine, tmp_path) -> Path:
    root = tmp_path / "ckpt"
    shutil.copytree(pristine, root)
    return root


def damage(path: Path, mode: str) -> None:
    """Truncate to half, overwrite 100 bytes with 0xFF (the issue's case), or flip one bit, mid-file."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    if mode == "truncated":
        data = data[:mid]
    elif mode == "garbled":
        data[mid:mid + 100] = b"\xff" * len(data[mid:mid + 100])
    else:
        data[mid] ^= 0x10
    path.write_bytes(bytes(data))


def reseal(ckpt: Path) -> None:
    """Rewrite the manifest after a deliberate edit, so the edit itself is what gets checked."""
    try:
        from ludic_core.training.checkpoint_integrity import write_manifest
    except ImportError:  # code from before manifests: nothing to reseal
        return
    write_manifest(ckpt)


def corrupt_error() -> type[Exception]:
    """The refusal's type (any exception on code that predates it, so a run shows what it did)."""
    from ludic_core.training import checkpoint

    return getattr(checkpoint, "CheckpointCorrupt", Exception)


def _load(root: Path, fresh, ctx=None) -> dict:
    model, opt, sched = fresh
    return load_checkpoint(root, model=model, optimizer=opt, scheduler=sched, ctx=ctx or init_distributed())


@pytest.mark.parametrize(("name", "mode"), MATRIX, ids=[f"{f}-{m}" for f, m in MATRIX])
def test_a_damaged_file_is_named_and_resume_falls_back_to_the_previous_checkpoint(run, fresh, name, mode, caplog):
    damage(run / STEP2 / name, mode)
    caplog.set_level(logging.WARNING, logger="ludic_core")
    try:
        state = _load(run, fresh)
    except Exception as exc:  # detected, but the run did not fall back
        pytest.fail(f"detected without falling back: {type(exc).__name__}: {exc}")
    assert state["step"] == 1, f"loaded the damaged checkpoint silently (step {state['step']})"
    assert state["path"] == str(run / STEP1) and state["data"] == {"cursor": 1}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(name in m and str(run / STEP2) in m for m in warned), warned
    want = load_file(run / STEP1 / "model" / "model.safetensors")
    got = fresh[0].state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items())  # step 1's weights, bit for bit


def test_the_issues_case_ff_bytes_in_the_weights_never_load_as_nan(run, fresh):
    CheckpointCorrupt = corrupt_error()
    weights = run / STEP2 / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-400:-300] = b"\xff" * 100  # inside the last tensor's data: valid safetensors, NaN values
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt, match=r"model/model\.safetensors") as info:
        _load(run / STEP2, fresh)  # an explicit checkpoint: no fallback, a named refusal
    assert str(run / STEP2) in str(info.value) and "sha256" in str(info.value)
    assert not any(torch.isnan(p).any() for p in fresh[0].parameters())


def test_no_intact_checkpoint_left_is_a_clear_error_never_a_silent_step_0(run, fresh):
    from ludic_core.training import checkpoint

    CheckpointCorrupt, verified_checkpoint = corrupt_error(), getattr(checkpoint, "verified_checkpoint", None)

    damage(run / STEP1 / "optimizer.safetensors", "bit_flipped")
    damage(run / STEP2 / "model" / "model.safetensors", "garbled")
    for attempt in (lambda: _load(run, fresh), lambda: verified_checkpoint(run)):
        with pytest.raises(CheckpointCorrupt, match="no intact checkpoint") as info:
            attempt()
        text = str(info.value)
        assert str(run / STEP1) in text and "optimizer.safetensors" in text
        assert str(run / STEP2) in text and "model/model.safetensors" in text


def test_a_stray_weights_file_cannot_override_the_checkpoints_tensors(run, fresh):
    """load_model_weights reads every model/*.safetensors: an added file would win silently."""
    from safetensors.torch import save_file

    CheckpointCorrupt = corrupt_error()
    real = load_file(run / STEP2 / "model" / "model.safetensors")
    save_file({"lm_head.weight": torch.zeros_like(real["lm_head.weight"])},
              run / STEP2 / "model" / "zz-extra.safetensors")
    with pytest.raises(CheckpointCorrupt, match="zz-extra.safetensors"):
        _load(run / STEP2, fresh)


def test_a_missing_manifest_in_a_new_checkpoint_is_corrupt(run, fresh):
    CheckpointCorrupt = corrupt_error()
    (run / STEP2 / "manifest.json").unlink()
    with pytest.raises(CheckpointCorrupt, match=r"manifest\.json"):
        _load(run / STEP2, fresh)


def test_an_old_checkpoint_without_manifest_loads_with_an_unverified_warning(run, fresh, caplog):
    """Written before manifests existed (format 1): loaded, and the log says it was not verified."""
    ckpt = run / STEP2
    (ckpt / "manifest.json").unlink(missing_ok=True)
    state = json.loads((ckpt / "trainer_state.json").read_text())
    (ckpt / "trainer_state.json").write_text(json.dumps({**state, "format": 1}))
    caplog.set_level(logging.WARNING, logger="ludic_core")
    assert _load(ckpt, fresh)["step"] == 2
    assert any("unverified" in r.getMessage() and str(ckpt) in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("step", ["x", -5, True, 2.0, 7, None])
def test_trainer_state_step_must_be_the_directorys_non_negative_integer(run, fresh, step):
    CheckpointCorrupt = corrupt_error()
    ckpt = run / STEP2
    state = json.loads((ckpt / "trainer_state.json").read_text())
    (ckpt / "trainer_state.json").write_text(json.dumps({**state, "step": step}))
    reseal(ckpt)  # a consistent manifest: the value itself must be refused
    with pytest.raises(CheckpointCorrupt, match=r"trainer_state\.json.*'step'") as info:
        _load(ckpt, fresh)
    assert str(ckpt) in str(info.value)


def test_a_trainer_state_that_is_not_an_object_is_named(run, fresh):
    CheckpointCorrupt = corrupt_error()
    ckpt = run / STEP2
    (ckpt / "trainer_state.json").write_text("[1, 2]")
    reseal(ckpt)
    with pytest.raises(CheckpointCorrupt, match=r"trainer_state\.json"):
        _load(ckpt, fresh)
