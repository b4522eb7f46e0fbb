"""What the sha256 manifest costs a checkpoint save and load, on the demo's tiny models.

`python benchmarks/checkpoint_hash.py [PRESET ...]` (default: tiny-1m, the demo's).
Each figure is the median of REPEATS runs, with and without the manifest
(`write_manifest` and `verify_files` switched off in-process for the "without").
`--smoke` (CI): one run each, proves the code path.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

REPEATS = 9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def measure(preset: str, repeats: int = REPEATS) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ludic_core.models import build_tiny_model
    from ludic_core.training import checkpoint, checkpoint_integrity
    from ludic_core.training.distributed import init_distributed

    tmp = Path(tempfile.mkdtemp(prefix="ckpt-hash-"))
    try:
        model_dir = build_tiny_model(tmp / preset, preset, seed=0)
        model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
        ctx = init_distributed()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(4, 260, (2, 16))
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        real_write, real_verify = checkpoint.write_manifest, checkpoint_integrity.verify_files
        out: dict[str, list[float]] = {k: [] for k in ("save_with", "save_without", "load_with", "load_without")}
        for i in range(repeats):
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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", default=["tiny-1m"], metavar="PRESET")
    ap.add_argument("--smoke", action="store_true", help="CI: one run each instead of REPEATS")
    args = ap.parse_args()
    print("| preset | checkpoint MiB | save ms with / without | load ms with / without |")
    print("|---|---|---|---|")
    results = {}
    for preset in args.presets:
        r = results[preset] = measure(preset, 1 if args.smoke else REPEATS)
        print(f"| {preset} | {r['mib']:.1f} | {r['save_with']:.0f} / {r['save_without']:.0f} "
              f"| {r['load_with']:.0f} / {r['load_without']:.0f} |")
    for preset, r in results.items():
        print(f"ratio (with manifest / without) save + load ms, {preset}: "
              f"{(r['save_with'] + r['load_with']) / (r['save_without'] + r['load_without']):.2f}x")


if __name__ == "__main__":
    main()
