"""A LoRA run checkpoints its adapter only (PEFT's format + the base's fingerprint),
resumes from it, refuses a wrong base, and merges only on an explicit export."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from ludic_core.algorithms import make_sft
from ludic_core.batching.sources import OfflineBatchSource
from ludic_core.config import LoRAConfig, TrainerConfig
from ludic_core.models import build_tiny_model, load_model_and_tokenizer
from ludic_core.training.export import export_merged
from ludic_core.training.trainer import Trainer


def _trainer(model_dir, items, ckpt, **cfg) -> Trainer:
    model, tok = load_model_and_tokenizer(model_dir)
    cfg = {"lr": 2e-2, "max_seq_len": 512, "dtype": "float32", "lora": LoRAConfig(r=4, alpha=8), **cfg}
    return Trainer(model, make_sft(), OfflineBatchSource(items, batch_size=8, seed=0), TrainerConfig(**cfg),
                   tokenizer=tok, checkpoint_dir=ckpt)


def _logits(model, ids) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(ids).logits.float().cpu()


IDS = torch.tensor([[5, 40, 41, 42, 7, 80, 81, 9, 100, 3]])


@pytest.fixture(scope="module")
def run(tiny_model_dir, sft_items, tmp_path_factory):
    """A LoRA trainer after 3 steps with its checkpoint at step 3."""
    ckpt = tmp_path_factory.mktemp("lora") / "checkpoints"
    tr = _trainer(tiny_model_dir, sft_items, ckpt)
    tr.train(3)
    return tr, tr.save_checkpoint()


def test_checkpoint_holds_the_adapter_in_peft_format_and_the_base_pointer(run, tiny_model_dir):
    from peft import PeftModel

    tr, path = run
    files = sorted(p.name for p in (path / "model").iterdir())
    assert {"adapter_config.json", "adapter_model.safetensors", "ludic_base.json", "tokenizer.json"} <= set(files)
    assert "config.json" not in files and "model.safetensors" not in files
    base_ref = json.loads((path / "model" / "ludic_base.json").read_text())
    assert base_ref["path"] == str(tiny_model_dir.resolve())
    assert len(base_ref["fingerprint"]["sha256"]) == 32 and base_ref["fingerprint"]["dtype"] == "float32"
    # PEFT itself loads it onto a fresh base and computes what the trainer computes
    base, _ = load_model_and_tokenizer(tiny_model_dir)
    trained = _logits(tr.model, IDS)
    assert float((_logits(base, IDS) - trained).abs().max()) > 1e-3  # the adapter is not a no-op
    assert float((_logits(PeftModel.from_pretrained(base, str(path / "model")), IDS) - trained).abs().max()) < 1e-5
    tr.model.train()


def test_checkpoint_model_files_are_adapter_sized(run, tiny_model_dir):
    _, path = run
    adapter = sum(f.stat().st_size for f in (path / "model").glob("*.safetensors"))
    full = sum(f.stat().st_size for f in tiny_model_dir.glob("*.safetensors"))
    # r=4 on q/k/v/o of 4 layers of width 128: 4*4*(4*128 + 128*4) = 16,384 fp32 values = 64 KiB;
    # the model is ~0.9M values (~3.6 MB)
    assert adapter < 70_000 and full > 3_000_000 and adapter * 40 < full


def test_resume_from_an_adapter_checkpoint_matches_a_straight_run(tiny_model_dir, sft_items, tmp_path):
    straight = _trainer(tiny_model_dir, sft_items, tmp_path / "a")
    straight.train(4)
    first = _trainer(tiny_model_dir, sft_items, tmp_path / "b")
    first.train(2)
    first.save_checkpoint()
    second = _trainer(tiny_model_dir, sft_items, tmp_path / "b")
    assert second.resume() and second.step == 2
    second.train(4)
    for (n, a), (_, b) in zip(straight.model.named_parameters(), second.model.named_parameters()):
        if "lora_" in n:
            assert torch.allclose(a, b, atol=1e-6), n


def test_resume_on_another_base_is_refused_naming_both(run, tiny_model_dir, sft_items, tmp_path):
    _, path = run
    other = build_tiny_model(tmp_path / "other-base", "tiny-1m", seed=1)  # same shapes, other weights
    tr = _trainer(other, sft_items, tmp_path / "unused")
    with pytest.raises(ValueError, match="trained on base model") as err:
        tr.resume(path)
    assert str(tiny_model_dir.resolve()) in str(err.value) and str(other.resolve()) in str(err.value)


def test_a_full_fine_tune_checkpoint_is_not_an_adapter(tiny_model_dir, sft_items, tmp_path):
    full = _trainer(tiny_model_dir, sft_items, tmp_path / "full", lora=None)
    full.train(1)
    path = full.save_checkpoint()
    with pytest.raises(ValueError, match="holds full model weights, not a LoRA adapter"):
        _trainer(tiny_model_dir, sft_items, tmp_path / "x").resume(path)
    with pytest.raises(ValueError, match="holds no LoRA adapter"):
        export_merged(path, tmp_path / "out")


def test_export_merged_writes_a_plain_model_equal_to_base_plus_adapter(run, tmp_path):
    tr, path = run
    out = export_merged(path.parent, tmp_path / "merged")  # the root: its latest checkpoint
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names and "adapter_config.json" not in names
    plain = AutoModelForCausalLM.from_pretrained(out)
    assert float((_logits(plain, IDS) - _logits(tr.model, IDS)).abs().max()) < 1e-5
    tr.model.train()
    with pytest.raises(FileExistsError):
        export_merged(path, out)


def test_export_with_a_wrong_base_is_refused(run, tmp_path):
    _, path = run
    other = build_tiny_model(tmp_path / "other", "tiny-1m", seed=2)
    with pytest.raises(ValueError, match="an adapter only fits its own base"):
        export_merged(path, tmp_path / "out", base=other)


def test_loaders_take_an_adapter_checkpoint_as_a_model(run):
    """Evaluation and the next stage load `step_N/model`: base + adapter, merged."""
    tr, path = run
    model, tok = load_model_and_tokenizer(path / "model")
    assert not hasattr(model, "peft_config") and tok.chat_template
    assert float((_logits(model, IDS) - _logits(tr.model, IDS)).abs().max()) < 1e-5
    tr.model.train()


def test_cli_export_merge(run, tmp_path, capsys):
    from flows.cli import main

    tr, path = run
    assert main(["export", "--merge", str(path), "--out", str(tmp_path / "m")]) == 0
    assert "plain model directory" in capsys.readouterr().out
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert float((_logits(plain, IDS) - _logits(tr.model, IDS)).abs().max()) < 1e-5
    tr.model.train()
    assert main(["export", "--merge", str(tmp_path / "nowhere"), "--out", str(tmp_path / "n")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.heavy  # two torchrun launches, ~55 s
def test_fsdp_two_ranks_checkpoint_and_resume_an_adapter(tiny_model_dir, tmp_path, rank_device):
    """2 FSDP2 ranks save an adapter checkpoint equal to the 1-process run's, and resume
    a 1-process adapter checkpoint; the base is never gathered, only the adapter is written."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    from ludic_core.lora.peft_model import adapter_state_dict
    from ludic_core.training.checkpoint import save_checkpoint
    from ludic_core.training.distributed import init_distributed

    worker = Path(__file__).with_name("_worker_fsdp_lora.py")
    repo = Path(__file__).resolve().parents[2]

    def torchrun(*args):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "LUDIC_DEVICE": rank_device,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), *args]
        proc = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-20000:]

    spec = importlib.util.spec_from_file_location("_worker_fsdp_lora", worker)
    w = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(w)
    ctx = init_distributed()
    torch.manual_seed(0)  # lora_A's random init, as the worker seeds it
    model, opt, sched = w.make_training(tiny_model_dir, ctx)
    w.base.train_steps(model, opt, sched, ctx, range(2))
    save_checkpoint(tmp_path / "single", 2, model=model, optimizer=opt, scheduler=sched, ctx=ctx)

    torchrun("train", str(tiny_model_dir), str(tmp_path / "fsdp"))
    saved = load_file(tmp_path / "fsdp" / "step_00000002" / "model" / "adapter_model.safetensors")
    mine = adapter_state_dict(model)
    assert saved.keys() == mine.keys() and max(float((saved[k] - mine[k]).abs().max()) for k in mine) < 1e-5

    torchrun("resume", str(tiny_model_dir), str(tmp_path / "fsdp"), str(tmp_path / "single" / "step_00000002"))
    w.base.train_steps(model, opt, sched, ctx, range(2, 3))
    saved = load_file(tmp_path / "fsdp" / "step_00000003" / "model" / "adapter_model.safetensors")
    mine = adapter_state_dict(model)
    assert max(float((saved[k] - mine[k]).abs().max()) for k in mine) < 1e-5
    assert max(float(mine[k].abs().max()) for k in mine if "lora_B" in k) > 1e-3  # B moved off its zero init
