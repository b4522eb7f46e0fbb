"""Rollout decode throughput: `LocalChatClient` vs plain HF `model.generate`.

Why the comparison is fair:
- one model object (same weights, fp32, default torch threads, `ludic_core`'s OpenMP
  wait policy: ludic_core/openmp.py) serves both;
- both decode the same `--batch` chat-template-rendered prompts, left-padded
  into one batch, with pure sampling (temperature 1, no top-k / top-p);
- both generate exactly `--max-tokens` tokens per row: A's eos set is replaced
  by an impossible id, B uses `min_new_tokens == max_new_tokens`; with `--ragged`
  row i ends after its own length instead (lengths spread evenly over 1..max-tokens,
  in shuffled order), as rows ending on eos do: A through each request's max_tokens,
  B through a stopping criterion that ends each row at its length, after which
  `generate` pads it, as it does after eos, until the longest ends. Tokens/s counts
  the rows' own tokens only;
- both run their torch work on the same single worker thread;
- each is warmed up once, then runs are interleaved A B, B A, A B, ... and
  the median is reported, so drift on a noisy machine hits both alike.
Not identical work: A also computes the log-prob of every sampled token (what
RL training needs) plus per-row seeded generators; B computes no log-probs.
A's time also includes its asyncio batching and its prompt lookup (the client keeps rendered
prompts by content, so after the warm-up round it renders no template). A prefills
the opening its prompts share (the system message: 87 of their 156-185 tokens) once,
as a serving engine's prefix cache would; B prefills every row whole.

    .venv/bin/python benchmarks/rollout_throughput.py --preset tiny-1m
    .venv/bin/python benchmarks/rollout_throughput.py --ragged      # rows of different lengths
    .venv/bin/python benchmarks/rollout_throughput.py --smoke       # CI: 2 rows x 4 tokens, one timed run
"""

from __future__ import annotations

from ludic_core import openmp

openmp.configure()  # first: OpenMP's spin-wait, set before torch loads (ludic_core/openmp.py)

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ludic_core.inference.local import LocalChatClient
from ludic_core.inference.sampling import ChatCompletionRequest, SamplingConfig
from ludic_core.models.loading import load_model_and_tokenizer
from ludic_core.models.tiny import build_tiny_model

SYSTEM = "You play tic-tac-toe as X. Reply with the cell to mark, e.g. 'b2'."


def make_messages(batch: int) -> list[list[dict]]:
    """`batch` distinct board observations of varying length (0..8 marks played)."""
    cells = [f"{c}{r}" for r in "123" for c in "abc"]
    out = []
    for i in range(batch):
        n_moves = i % 9
        order = cells[i % 9:] + cells[: i % 9]
        board = ["."] * 9
        for k, cell in enumerate(order[:n_moves]):
            board[cells.index(cell)] = "XO"[k % 2]
        rows = "\n".join(" ".join(board[r * 3:r * 3 + 3]) for r in range(3))
        moves = ", ".join(order[:n_moves]) or "none"
        obs = f"Game {i}. Moves so far: {moves}.\nBoard:\n{rows}\nYour move."
        out.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": obs}])
    return out


def run_local(loop, client: LocalChatClient, requests: list[ChatCompletionRequest]) -> int:
    async def go():
        return await asyncio.gather(*(client.complete(r) for r in requests))

    results = loop.run_until_complete(go())
    return sum(len(resp.completion_token_ids) for resp, _ in results)


class RowsEnd(StoppingCriteria):
    """Row i of `generate`'s batch ends after lengths[i] new tokens, as if it had sampled eos there."""

    def __init__(self, prompt_width: int, lengths: list[int]) -> None:
        self.width, self.lengths = prompt_width, torch.tensor(lengths)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        return (input_ids.shape[1] - self.width) >= self.lengths


def run_generate(model, ids: torch.Tensor, mask: torch.Tensor, n: int, pad_id: int, lengths: list[int]) -> int:
    stop = StoppingCriteriaList([RowsEnd(ids.shape[1], lengths)]) if min(lengths) < n else None
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
            top_p=1.0, max_new_tokens=n, min_new_tokens=n, pad_token_id=pad_id,
            output_scores=False, stopping_criteria=stop,
        )
    assert out.shape[1] - ids.shape[1] == max(lengths)
    return sum(lengths)  # a row's tokens past its end are padding


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["tiny-1m", "tiny-10m"], default="tiny-1m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model-dir", help="existing HF model dir (default: build the tiny preset)")
    ap.add_argument("--vocab", type=int, default=None,
                    help="pad the model's vocabulary to this size (e.g. 151936, Qwen2.5's) to measure "
                         "sampling cost at a real vocabulary; extra ids decode to nothing")
    ap.add_argument("--compiled", action="store_true",
                    help="add a third contestant: LocalChatClient(compile=True) (inductor on the CPU; its one-off "
                         "compile falls in the warm-up round and is printed)")
    ap.add_argument("--ragged", action="store_true",
                    help="rows end at different lengths, spread evenly over 1..max-tokens, as rows ending on eos "
                         "do; generate ends each at its length (a stopping criterion) and, as it does for eos, "
                         "pads finished rows until the longest ends")
    ap.add_argument("--json", action="store_true", help="also print one JSON line")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 2 rows x 4 tokens, one timed run each (with the other flags: their paths too)")
    args = ap.parse_args()
    if args.smoke:
        args.batch, args.max_tokens, args.repeats = 2, 4, 1
    n, batch = args.max_tokens, args.batch

    if args.model_dir:
        model_dir = Path(args.model_dir)
    else:
        root = Path("runs/bench") if Path("runs").is_dir() else Path(tempfile.gettempdir()) / "ludic_bench"
        model_dir = build_tiny_model(root / args.preset, args.preset)
    model, tok = load_model_and_tokenizer(model_dir, dtype="float32")
    if args.vocab:
        torch.manual_seed(0)
        model.resize_token_embeddings(args.vocab, mean_resizing=False)

    # Contestant A. Forcing exactly n tokens per row: no real id equals -1, so
    # no row can stop on eos and every row runs to max_tokens, as B does.
    client = LocalChatClient(model, tok, max_batch_size=max(batch, 1))
    client._decoder.eos_ids = {-1}
    # row i's length; shuffled, so rows end out of slot order
    lengths = [n * (i + 1) // batch for i in torch.randperm(batch, generator=torch.Generator().manual_seed(0))] \
        if args.ragged else [n] * batch
    lengths = [max(1, x) for x in lengths]
    requests = [
        ChatCompletionRequest(messages=m, sampling=SamplingConfig(temperature=1.0, max_tokens=lengths[i], seed=i))
        for i, m in enumerate(make_messages(batch))
    ]

    # Contestant B: the same prompt ids, left-padded into one batch.
    prompts = [client.encode_prompt(r) for r in requests]
    width = max(len(p) for p in prompts)
    pad_id = client._decoder.pad_id
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1

    # All torch work runs on ONE thread: A decodes on the client's decode thread
    # and B is submitted to that same thread. Alternating torch work between two
    # threads gives each its own OpenMP team; on 2 cores that measured ~40% slower
    # (before ludic_core set OpenMP's wait policy: ludic_core/openmp.py).
    worker = client._executor
    loop = asyncio.new_event_loop()
    contestants = {
        "LocalChatClient": lambda: run_local(loop, client, requests),
        "HF generate": lambda: worker.submit(run_generate, model, ids, mask, n, pad_id, lengths).result(),
    }
    if args.compiled:
        compiled = LocalChatClient(model, tok, max_batch_size=max(batch, 1), compile=True)
        compiled._decoder.eos_ids = {-1}
        compiled._executor = worker
        contestants["local, compiled"] = lambda: run_local(loop, compiled, requests)
    times: dict[str, list[float]] = {k: [] for k in contestants}
    for name, fn in contestants.items():  # warm-up, and check the token count
        got = fn()
        assert got == sum(lengths), f"{name} generated {got} tokens, expected {sum(lengths)}"
    order = list(contestants)
    for r in range(args.repeats):  # A B, B A, A B, ...: whoever runs second
        for name in order if r % 2 == 0 else order[::-1]:  # was ~5% faster
            fn = contestants[name]
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    for c in [client] + ([compiled] if args.compiled else []):  # a drain may outlive its last request by a turn
        if c._drain_task is not None:
            loop.run_until_complete(c._drain_task)
    loop.close()

    med = {k: statistics.median(v) for k, v in times.items()}
    tps = {k: sum(lengths) / s for k, s in med.items()}
    ratio = tps["LocalChatClient"] / tps["HF generate"]
    print(f"preset={args.preset} vocab={model.config.vocab_size} batch={batch} max_tokens={n} repeats={args.repeats} "
          f"prompt_len={min(map(len, prompts))}..{width} threads={torch.get_num_threads()}"
          + (f" ragged: rows end after 1..{n} tokens, {sum(lengths)} in all" if args.ragged else ""))
    print(f"{'engine':<18}{'tokens/s':>10}{'median_s':>10}")
    for k in contestants:
        note = "  (+ log-probs)" if k != "HF generate" else "  (no log-probs)"
        print(f"{k:<18}{tps[k]:>10.0f}{med[k]:>10.3f}{note}")
    print(f"ratio (local / generate): {ratio:.2f}x")
    if args.compiled:
        print(f"ratio (compiled / generate): {tps['local, compiled'] / tps['HF generate']:.2f}x"
              f"   one-off compile: {compiled.stats['compile_seconds']:.1f} s")
    if args.json:
        print(json.dumps({
            "preset": args.preset, "batch": batch, "max_tokens": n, "repeats": args.repeats,
            "seconds": times, "tokens_per_s": tps, "ratio_local_over_generate": ratio,
        }))


if __name__ == "__main__":
    main()
