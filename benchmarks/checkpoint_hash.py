"""What the sha256 manifest costs a checkpoint save and load, on the demo's tiny models.

`python benchmarks/checkpoint_hash.py [PRESET ...]` (default: tiny-1m, the demo's).
Each figure is the median of REPEATS runs, with and without the manifest
(`write_manifest` and `verify_files` switched off in-process for the "without").
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def measure(preset: str) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ludic_core.models import build_tiny_model
    from ludic_core.training import checkpoint, checkpoint_integrity
    from ludic_core.training.distributed import init_distributed

    tmp = Path(tempfile.mkdtemp(prefix="ckpt-hash-"))
    model_dir = build_tiny_model(tmp / preset, preset, seed=0)
    model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    ctx = init_distributed()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(4, 260, (2, 16))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    real_write, real_verify = checkpoint.write_manifest, checkpoint_integrity.verify_files
    out: dict[str, list[float]] = {k: [] for k in ("save_with", "save_without", "load_with", "load_without")}
    for i in range(REPEATS):
        for hashed in (True, False):
            checkpoint.write_manifest = real_write if hashed else (lambda d: None)
            checkpoint_integrity.verify_files = real_verify if hashed else (lambda d: True)
            root, tag = tmp / f"run-{i}-{hashed}", "with" if hashed else "without"
            out[f"save_{tag}"].append(_timed(lambda: checkpoint.save_checkpoint(
                root, 1, model=model, optimizer=opt, ctx=ctx, tokenizer=tok)))
            out[f"load_{tag}"].append(_timed(lambda: checkpoint.load_checkpoint(
                root, model=model, optimizer=opt, ctx=ctx)))
    checkpoint.write_manifest, checkpoint_integrity.verify_files = real_write, real_verify
    size = sum(p.stat().st_size for p in (tmp / "run-0-True" / "step_00000001").rglob("*") if p.is_file())
    return {"mib": size / 2**20, **{k: statistics.median(v) for k, v in out.items()}}


def main(presets: list[str]) -> None:
    print("| preset | checkpoint MiB | save ms with / without | load ms with / without |")
    print("|---|---|---|---|")
    for preset in presets:
        r = measure(preset)
        print(f"| {preset} | {r['mib']:.1f} | {r['save_with']:.0f} / {r['save_without']:.0f} "
              f"| {r['load_with']:.0f} / {r['load_without']:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["tiny-1m"])
