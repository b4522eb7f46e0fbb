"""On a GPU: `BatchDecoder`'s CUDA-graph step at one batch size, against HF `generate`.

A short check of the decode step alone (what `benchmarks/gpu.py --sections generate`
measures inside the full client), sized to fit a few minutes of a lent GPU: the
Qwen2.5-0.5B shape of `gpu.py` (random weights, bf16, vocab 151,936), `--batch` rows
of exactly `--tokens` new tokens each (no eos), T=1, two bucket widths:
- continuous: `run(continuous=True)`, LocalChatClient's path, which gives a frame 2x
  column headroom for rows that join mid-run;
- tight: `generate` (all rows arrive at once), columns rounded up to a power of two only.
Each is compiled once (the first call; its time is printed), then timed; HF `generate`
runs twice after them on the same model (the first call warms it up). Not interleaved:
read the ratio as one run's.

    python3 benchmarks/gpu_decode.py                 # on a CUDA machine
    .venv/bin/python benchmarks/gpu_decode.py --device cpu --small
    .venv/bin/python benchmarks/gpu_decode.py --smoke  # CI: toy sizes; without CUDA, the CPU twin (it says so)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("ludic_gpu_bench", Path(__file__).with_name("gpu.py"))
gpu = importlib.util.module_from_spec(_spec)
sys.modules["ludic_gpu_bench"] = gpu
_spec.loader.exec_module(gpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny model (to prove the code path on the CPU)")
    ap.add_argument("--batch", type=int, default=None, help="rows (default: gpu.py's largest generate batch)")
    ap.add_argument("--tokens", type=int, default=None, help="new tokens per row (default: gpu.py's)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: gpu.py's smoke sizes (vocab 512), 2 rows x 4 tokens; without CUDA it runs the CPU "
                         "twin (--device cpu) instead of skipping, and says so")
    args = ap.parse_args()
    from ludic_core.device import cuda_available

    if args.smoke and args.device != "cpu" and not cuda_available():
        print("no CUDA: --smoke runs the CPU twin (--device cpu): it proves the code path, measures no GPU")
        args.device = "cpu"
    if args.device != "cpu" and not cuda_available():
        print("no CUDA: nothing to measure (run on a GPU machine)")
        return 0
    from ludic_core.inference import ChatCompletionRequest, LocalChatClient, SamplingConfig

    s = gpu.SMOKE if args.smoke else gpu.SMALL if args.small else gpu.FULL
    device = torch.device(args.device)
    batch, n = args.batch or s.gen_batches[-1], args.tokens or s.gen_tokens
    model, tok = gpu.build_model(s, device)
    model = model.to(torch.bfloat16).eval()
    msgs, _ = gpu.arithmetic_messages(batch)
    reqs = [ChatCompletionRequest(messages=m, sampling=SamplingConfig(temperature=1.0, max_tokens=n, seed=i))
            for i, m in enumerate(msgs)]
    print(f"batch {batch}, {n} new tokens per row, vocab {s.vocab}, bf16, T=1")
    tps = {}
    for continuous in (True, False):
        torch._dynamo.reset()
        client = LocalChatClient(model, tok, device=args.device, dtype="bfloat16", max_batch_size=batch, compile=True)
        dec = client._decoder
        dec.eos_ids = {-1}  # every row decodes exactly n tokens
        prompts = [client.encode_prompt(r) for r in reqs]
        times = []
        with torch.no_grad():
            for _ in range(3):
                t0 = time.perf_counter()
                if continuous:
                    pending = [list(zip(prompts, [r.sampling for r in reqs], range(batch)))]
                    dec.run(lambda: pending.pop() if pending else [], lambda k, g: None, max_batch=batch)
                else:
                    dec.generate(prompts, [r.sampling for r in reqs])
                gpu.sync(device)
                times.append(time.perf_counter() - t0)
        best = min(times[1:])
        tps["continuous" if continuous else "tight"] = batch * n / best
        print(f"{'continuous' if continuous else 'tight':<11} frames {list(dec._frames)}: first call {times[0]:.1f} s "
              f"(compile + capture), then {best:.3f} s = {batch * n / best:.0f} tok/s, {best / n * 1e3:.2f} ms/step")
    width = max(map(len, prompts))
    ids = torch.full((batch, width), dec.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    ids, mask = ids.to(device), mask.to(device)
    for call in ("first", "second"):
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                           max_new_tokens=n, min_new_tokens=n, pad_token_id=dec.pad_id)
        gpu.sync(device)
        sec = time.perf_counter() - t0
        print(f"HF generate, {call} call: {sec:.3f} s = {batch * n / sec:.0f} tok/s")
    for name in ("continuous", "tight"):
        print(f"ratio ({name} / HF generate's second call) tok/s: {tps[name] / (batch * n / sec):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
