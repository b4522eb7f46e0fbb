"""On a GPU: trainer tok/s, MFU and peak memory; decode vs HF generate; a GRPO step vs TRL.

One run prints every measured ratio side by side, on a model shaped like
Qwen2.5-0.5B (24 layers, hidden 896, 14 query / 2 KV heads, MLP 4864, vocab
151,936, tied embeddings: 494M parameters) with random weights, built offline
with `LlamaConfig` (no hub). Its tokenizer is ludic's byte-level one (260
tokens): ids the model samples beyond those decode to nothing, never an error.

Sections (`--sections`, all by default):
- trainer: `Trainer.train_step` (REINFORCE, bf16 autocast over fp32 master
  weights) vs a bare bf16 loop doing the old trainer's full-vocab
  `log_softmax(logits.float())` + gather at every position, on the same model,
  optimizer and micro-batches (64 items of 256-1536 tokens, prompts 1/4-1/2 of
  each, 32k-token budget). tok/s counts real (non-pad) tokens; MFU =
  6 * N * tok/s / peak (989 TFLOP/s: H100 bf16 dense); peak memory is
  torch.cuda.max_memory_allocated over one step (resident = weights + AdamW).
  A third contestant is the Trainer with `compile: true` (its own copy of the
  model); `--packed-attn flex_attention` adds one that packs every micro-batch.
- generate: `LocalChatClient` vs `model.generate` on one bf16 model, batch 64
  and 128, exactly 128 new tokens per row (the client's eos set is replaced by
  an impossible id; generate gets min_new_tokens == max_new_tokens), pure
  sampling, the same chat prompts, both on the client's decode thread. The
  client also computes every sampled token's log-prob; generate does not.
- grpo: one synchronous GRPO step, 16 prompts x 8 completions of up to 128
  tokens at T=0.7, KL 0, bf16, no vLLM. ludic: RolloutBatchSource +
  make_grpo + Trainer, rollouts from an in-process LocalChatClient (its own
  bf16 copy, refreshed by InProcessPublisher every step) on offline
  arithmetic problems with a numeric verifier. TRL's GRPOTrainer: the same
  prompts and verifier, one 128-completion generation and one optimizer step
  per step (use_vllm False, gradient checkpointing off, fp32 master weights +
  bf16 autocast). ludic's steps first, then TRL's alone (both at once do
  not fit one 80 GB GPU); medians after a warm-up step. Random weights earn
  no reward, so ludic's trainer skips every item (zero advantage); its "no
  skip" steps (`skip_inert: false`) score and back-propagate all of them: the
  cost of a step in which every group carries signal.
Steps are interleaved and medians reported; nothing is asserted about time.

    python benchmarks/gpu.py                          # on a CUDA machine
    .venv/bin/python benchmarks/gpu.py --device cpu --small   # prove the code path here
    .venv/bin/python benchmarks/gpu.py --smoke        # CI: toy sizes; without CUDA, the CPU twin (it says so)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import gc
import random
import statistics
import tempfile
import time
import warnings
from typing import Callable

import torch

from ludic_core.device import cuda_available, resolve_device


@dataclasses.dataclass(frozen=True)
class Sizes:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    items: int
    item_len: tuple[int, int]
    budget: int
    train_steps: int
    gen_batches: tuple[int, ...]
    gen_tokens: int
    gen_repeats: int
    prompts: int
    group: int
    grpo_tokens: int
    grpo_steps: int
    vocab: int = 151_936


FULL = Sizes(896, 24, 14, 2, 4864, 64, (256, 1536), 32_768, 5, (64, 128), 128, 3, 16, 8, 128, 4)
SMALL = Sizes(64, 2, 4, 2, 128, 8, (64, 192), 512, 2, (4, 8), 16, 2, 4, 4, 16, 2)
# --smoke: every section and contestant once at toy sizes, with a 512-token vocabulary (the byte
# tokenizer's 260 fit): bf16 on a CPU is emulated, and at 151,936 a CPU trainer step takes minutes
SMOKE = Sizes(64, 2, 4, 2, 128, 2, (32, 64), 256, 1, (2,), 4, 1, 2, 2, 4, 1, vocab=512)


# ---- shared helpers ---------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_model(s: Sizes, device: torch.device):
    """(model in fp32 on `device`, byte tokenizer); same weights for every call."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ludic_core.models import build_byte_tokenizer

    tok = build_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.intermediate,
        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
        max_position_embeddings=32_768, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def arithmetic_messages(n: int) -> tuple[list[list[dict]], list[str]]:
    """`n` chat prompts (system + question) and their gold answers."""
    from ludic_core.envs import generate_arithmetic_problems, gsm8k_target_parser
    from ludic_core.envs.arithmetic import ARITHMETIC_SYSPROMPT

    problems = generate_arithmetic_problems(n, seed=0)
    msgs = [[{"role": "system", "content": ARITHMETIC_SYSPROMPT}, {"role": "user", "content": p["question"]}]
            for p in problems]
    return msgs, [gsm8k_target_parser(p["answer"]) for p in problems]


def interleave(contestants: dict[str, Callable], repeats: int, device: torch.device,
               on_oom: Callable[[], None] = lambda: None):
    """Warm each up once, then run A B, B A, ...; per name: (seconds list, peak bytes, resident bytes).

    A contestant that runs out of GPU memory (or fails: printed) is reported as OOM and not run again.
    """
    times = {k: [] for k in contestants}
    peak = {k: 0 for k in contestants}
    resident = {k: 0 for k in contestants}
    oom: set[str] = set()
    order = list(contestants)
    for r in range(repeats + 1):  # round 0 is the warm-up
        for name in order if r % 2 == 0 else order[::-1]:
            if name in oom:
                continue
            sync(device)
            if device.type == "cuda":
                resident[name] = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            try:
                contestants[name]()
            except torch.cuda.OutOfMemoryError:
                oom.add(name)
            except Exception as exc:  # noqa: BLE001 - one contestant's failure must not end the others' run
                print(f"{name} failed and is left out: {type(exc).__name__}: {str(exc)[:300]}")
                oom.add(name)
            if name in oom:  # outside the except: its traceback no longer pins the step's tensors
                on_oom()
                gc.collect()
                torch.cuda.empty_cache()
                continue
            sync(device)
            if r:
                times[name].append(time.perf_counter() - t0)
            if device.type == "cuda":
                peak[name] = max(peak[name], torch.cuda.max_memory_allocated(device))
    return times, peak, resident, oom


def gib(n: float) -> str:
    return f"{n / 2**30:.1f}"


# ---- trainer ------------------------------------------------------------------------
class FixedSource:
    def __init__(self, items): self.items = items
    def next_batch(self):
        from ludic_core.batching.saw import SAWBatch
        return SAWBatch(items=list(self.items))
    def state_dict(self): return {}
    def load_state_dict(self, state): pass


def random_items(s: Sizes):
    from ludic_core.batching.saw import SAWItem

    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    items = []
    for _ in range(s.items):
        n = rng.randint(*s.item_len)
        prompt = rng.randint(n // 4, n // 2)
        ids = torch.randint(0, s.vocab, (n,), generator=gen).tolist()
        items.append(SAWItem(ids, [1] * n, [0] * prompt + [1] * (n - prompt), weight=rng.uniform(-1, 1)))
    return items


def bare_step(model, opt, mbs, num_tokens: float, device: torch.device) -> None:
    """The old trainer's math, by hand: full-vocab fp32 log-softmax at every position."""
    for mb in mbs:
        ids, attn = mb.input_ids.to(device), mb.attention_mask.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(input_ids=ids, attention_mask=attn).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        act, w = mb.action_mask[:, 1:].to(device), mb.weights.to(device)
        loss = -(w[:, None] * logp * act).sum() / num_tokens
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def with_attention(model, implementation: str, step: Callable[[], object]) -> Callable[[], None]:
    """`step` run with the model's attention switched to `implementation`, then back."""
    def run() -> None:
        before = model.config._attn_implementation
        model.set_attn_implementation(implementation)
        try:
            step()
        finally:
            model.set_attn_implementation(before)
    return run


def PackedTrainer(*args, **kwargs):
    """A Trainer that packs every micro-batch, even where padding computes fewer positions."""
    from ludic_core.batching.packing import pack_micro_batches
    from ludic_core.training.micro_batches import MicroBatcher
    from ludic_core.training.trainer import Trainer

    class AlwaysPacked(MicroBatcher):
        def _collate(self, items):
            return pack_micro_batches(items, micro_token_budget=self.budget, pad_id=self.pad_id)
    trainer = Trainer(*args, **kwargs)
    b = trainer.batcher
    trainer.batcher = AlwaysPacked(micro_token_budget=b.budget, pad_id=b.pad_id, packing=b.packing, scorer=b.scorer,
                                   ctx=b.ctx, compute_dtype=b.compute_dtype)
    return trainer


def _positions_of(mbs) -> int:
    return sum((mb.packed.input_ids if mb.packed is not None else mb.input_ids).numel() for mb in mbs)


def section_trainer(args, s: Sizes, device: torch.device) -> None:
    from ludic_core.algorithms import make_reinforce
    from ludic_core.batching.collate import collate_micro_batches
    from ludic_core.config import TrainerConfig
    from ludic_core.device import forward_cost_tokens
    from ludic_core.training.trainer import Trainer

    model, tok = build_model(s, device)
    n_params = sum(p.numel() for p in model.parameters())
    items = random_items(s)
    cfg = TrainerConfig(lr=1e-5, micro_token_budget=s.budget, max_seq_len=s.item_len[1],
                        device=args.device, dtype="bfloat16")
    trainer = Trainer(model, make_reinforce(), FixedSource(items), cfg, tokenizer=tok)
    mbs = collate_micro_batches(items, micro_token_budget=s.budget, pad_id=trainer.pad_id,
                                batch_overhead_tokens=forward_cost_tokens(device))
    num_tokens = sum(mb.action_tokens for mb in mbs)
    real = sum(mb.real_tokens for mb in mbs)
    contestants = {  # the same model and AdamW: only the step's computation differs
        "ludic Trainer": trainer.train_step,
        "bare bf16 loop": lambda: bare_step(trainer.model, trainer.optimizer, mbs, num_tokens, device),
    }
    if not args.no_compile:  # its own copy of the model: compiling changes the layers in place
        compiled = Trainer(copy.deepcopy(model), make_reinforce(), FixedSource(items),
                           cfg.model_copy(update={"compile": True}), tokenizer=tok)
        contestants["Trainer, compiled"] = compiled.train_step
    attn = args.packed_attn or "none"
    if attn != "none":  # the same model again, always packed rows under a document mask (its own AdamW)
        packed = PackedTrainer(model, make_reinforce(), FixedSource(items), cfg.model_copy(update={"packing": True}),
                               tokenizer=tok)
        contestants[f"packed, {attn.split('_')[0]}"] = with_attention(packed.model, attn, packed.train_step)
    t0 = time.perf_counter()
    times, peak, resident, oom = interleave(contestants, args.repeats or s.train_steps, device,
                                            on_oom=lambda: trainer.optimizer.zero_grad(set_to_none=True))
    print(f"(trainer section: {time.perf_counter() - t0:.0f} s, the compiled contestant's one-off compile included)")
    lengths = sorted(len(i) for i in items)
    scorer = getattr(trainer, "scorer", None)
    path = "fused lm_head, no logits" if getattr(scorer, "fused", False) else "chunked, from logits"
    print(f"\n== trainer: {len(items)} items of {lengths[0]}..{lengths[-1]} tokens ({real} real), "
          f"{len(mbs)} micro-batches at budget {s.budget}, bf16 autocast, N={n_params / 1e6:.0f}M params; "
          f"Trainer log-probs: {path}")
    print(f"{'loop':<20}{'median s':>9}{'tok/s':>9}{'MFU':>7}{'peak GiB':>10}{'resident':>9}")
    tps = {}
    for name in contestants:
        if name in oom or not times[name]:
            print(f"{name:<20}{'OOM':>9}")
            continue
        med = statistics.median(times[name])
        tps[name] = real / med
        mfu = f"{6 * n_params * tps[name] / (args.peak_tflops * 1e12) * 100:.1f}%" if device.type == "cuda" else "n/a"
        mem = (gib(peak[name]), gib(resident[name])) if device.type == "cuda" else ("n/a", "n/a")
        print(f"{name:<20}{med:>9.3f}{tps[name]:>9.0f}{mfu:>7}{mem[0]:>10}{mem[1]:>9}")
    print(f"Trainer micro-batches: {trainer.history[-1]['micro_batches']:.0f}, padded rows without a mask: "
          f"{trainer.batcher.causal}")
    base = "bare bf16 loop"
    for name in (n for n in tps if n != base and base in tps):
        line = f"ratio ({name} / bare) tok/s: {tps[name] / tps[base]:.2f}x"
        if device.type == "cuda":
            line += f"   peak memory: {peak[name] / peak[base]:.2f}x"
        print(line)
    if attn != "none":
        rows = packed.batcher._collate(items)
        print(f"packed contestant: {len(rows)} micro-batches of {[tuple(mb.packed.input_ids.shape) for mb in rows]}, "
              f"{_positions_of(rows)} positions vs {_positions_of(mbs)} padded (the Trainer's own choice is the "
              f"fewer); packing kept after its check: {packed.packing}")


# ---- generate -----------------------------------------------------------------------
def section_generate(args, s: Sizes, device: torch.device) -> None:
    from ludic_core.inference import ChatCompletionRequest, LocalChatClient, SamplingConfig

    model, tok = build_model(s, device)
    n = s.gen_tokens
    client = LocalChatClient(model, tok, device=args.device, dtype="bfloat16", max_batch_size=max(s.gen_batches))
    client._decoder.eos_ids = {-1}  # no real id: every row decodes exactly n tokens, as generate does
    model, pad_id = client.model, client._decoder.pad_id
    eager = LocalChatClient(model, tok, device=args.device, max_batch_size=max(s.gen_batches), compile=False)
    eager._decoder.eos_ids = {-1}
    eager._executor = client._executor  # one decode thread for every contestant
    loop = asyncio.new_event_loop()
    print(f"\n== generate: {n} new tokens per row, bf16, pure sampling (T=1), vocab {s.vocab}")
    print(f"{'batch':>5}  {'engine':<17}{'tok/s':>9}{'median s':>10}")
    for batch in s.gen_batches:
        msgs, _ = arithmetic_messages(batch)
        requests = [ChatCompletionRequest(messages=m, sampling=SamplingConfig(temperature=1.0, max_tokens=n, seed=i))
                    for i, m in enumerate(msgs)]
        prompts = [client.encode_prompt(r) for r in requests]
        width = max(map(len, prompts))
        ids = torch.full((batch, width), pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
        ids, mask = ids.to(device), mask.to(device)

        def local(c=client) -> None:
            async def go():
                return await asyncio.gather(*(c.complete(r) for r in requests))
            got = sum(len(resp.completion_token_ids) for resp, _ in loop.run_until_complete(go()))
            assert got == batch * n, f"LocalChatClient made {got} tokens, expected {batch * n}"

        def generate() -> None:
            def run():
                with torch.inference_mode():
                    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                         top_k=0, top_p=1.0, max_new_tokens=n, min_new_tokens=n,
                                         pad_token_id=pad_id)
                sync(device)
                return (out.shape[1] - width) * out.shape[0]
            got = client._executor.submit(run).result()  # the decode thread: one torch thread pool
            assert got == batch * n, f"generate made {got} tokens, expected {batch * n}"

        times, _, _, oom = interleave({"LocalChatClient": local, "local, eager step": lambda: local(eager),
                                       "HF generate": generate}, args.repeats or s.gen_repeats, device)
        tps = {k: batch * n / statistics.median(v) for k, v in times.items() if v}
        for k in ("LocalChatClient", "local, eager step", "HF generate"):
            note = "  (+ log-probs)" if k != "HF generate" else ""
            cell = f"{tps[k]:>9.0f}{batch * n / tps[k]:>10.3f}" if k in tps else f"{'OOM':>9}"
            print(f"{batch:>5}  {k:<17}{cell}{note}")
        if "LocalChatClient" in tps and "HF generate" in tps:
            print(f"ratio (local / generate) tok/s, batch {batch}: {tps['LocalChatClient'] / tps['HF generate']:.2f}x"
                  f"   (eager step: {tps.get('local, eager step', 0) / tps['HF generate']:.2f}x)"
                  f"   prompts {min(map(len, prompts))}..{width} tokens;"
                  f" compile + capture so far {client.stats['compile_seconds']:.1f} s (once per shape bucket)")
    loop.close()


# ---- GRPO step ---------------------------------------------------------------------
def ludic_grpo(args, s: Sizes, device: torch.device, msgs, answers):
    """A ludic GRPO trainer whose every train_step rolls out fresh groups."""
    from ludic_core.agents import Agent
    from ludic_core.algorithms import make_grpo
    from ludic_core.batching.sources import RolloutBatchSource
    from ludic_core.config import TrainerConfig
    from ludic_core.envs import DatasetQAEnv, numeric_verifier
    from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.parsers import xml_tag_parser
    from ludic_core.publish import InProcessPublisher
    from ludic_core.rollout import EnvConfig, ProtocolSpec, RolloutEngine, RolloutRequest
    from ludic_core.training.trainer import Trainer

    policy, tok = build_model(s, device)
    client = LocalChatClient(copy.deepcopy(policy), tok, device=args.device, dtype="bfloat16",
                             max_batch_size=s.prompts * s.group)
    data = [{"question": m[1]["content"], "answer": a} for m, a in zip(msgs, answers)]
    env = lambda: DatasetQAEnv(data, verifier=numeric_verifier, system_prompt=msgs[0][0]["content"])  # noqa: E731
    agent = lambda: SingleAgentSyncProtocol(Agent(client, parser=xml_tag_parser("answer")))  # noqa: E731
    engine = RolloutEngine({"qa": env}, {"single": agent}, max_concurrency=s.prompts * s.group)
    spec = InferenceSpec(sampling=SamplingConfig(temperature=0.7, max_tokens=s.grpo_tokens))

    def make_requests(i: int):
        return [RolloutRequest(env=EnvConfig(name="qa"), protocol=ProtocolSpec(kind="single"),
                               env_seed=i * s.prompts + k, inference=spec) for k in range(s.prompts)]

    algo = make_grpo(group_size=s.group, kl_coef=0.0)
    source = RolloutBatchSource(engine, make_requests, algo, max_steps=1, strategy_seed=0)
    cfg = TrainerConfig(lr=1e-6, micro_token_budget=s.budget, max_seq_len=4096, device=args.device, dtype="bfloat16")
    return Trainer(policy, algo, source, cfg, tokenizer=tok, publisher=InProcessPublisher(client)), source


def trl_grpo(args, s: Sizes, device: torch.device, msgs, answers) -> tuple[list[float], list[float]] | None:
    """TRL GRPOTrainer step times (after one warm-up step) and completion lengths; None without TRL."""
    try:
        import datasets
        import trl
        from transformers import PrinterCallback, TrainerCallback
    except ImportError as exc:
        print(f"TRL GRPOTrainer: skipped: {exc.name} not installed (the dev extra pins trl)")
        return None
    from transformers.utils import logging as hf_logging

    from ludic_core.envs import numeric_verifier
    from ludic_core.parsers import xml_tag_parser

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, not ours to fix
    parse = xml_tag_parser("answer")

    def correct(completions, answer, **_):
        return [1.0 if (a := parse(c[0]["content"]).action) is not None and numeric_verifier(a, gold) else 0.0
                for c, gold in zip(completions, answer)]

    class StepClock(TrainerCallback):
        def __init__(self): self.ticks, self.lengths = [], []
        def on_train_begin(self, *a, **kw): sync(device); self.ticks.append(time.perf_counter())
        def on_step_end(self, *a, **kw): sync(device); self.ticks.append(time.perf_counter())
        def on_log(self, _args, _state, _control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    model, tok = build_model(s, device)
    dataset = datasets.Dataset.from_list([{"prompt": m, "answer": a} for m, a in zip(msgs, answers)])
    clock = StepClock()
    with tempfile.TemporaryDirectory() as out:
        config = trl.GRPOConfig(
            output_dir=out, per_device_train_batch_size=s.prompts * s.group, gradient_accumulation_steps=1,
            num_generations=s.group, max_completion_length=s.grpo_tokens, temperature=0.7, top_p=1.0, top_k=0,
            beta=0.0, bf16=True, use_vllm=False, gradient_checkpointing=False, learning_rate=1e-6,
            max_grad_norm=1.0, max_steps=1 + s.grpo_steps, logging_steps=1, report_to="none",
            save_strategy="no", shuffle_dataset=False, use_cpu=device.type == "cpu", seed=0, disable_tqdm=True)
        trainer = trl.GRPOTrainer(model=model, reward_funcs=correct, args=config, train_dataset=dataset,
                                  processing_class=tok, callbacks=[clock])
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    del trainer, model
    steps = [b - a for a, b in zip(clock.ticks, clock.ticks[1:])]
    print(f"(TRL {trl.__version__}, datasets {datasets.__version__})")
    return steps[1:], clock.lengths[1:]


def section_grpo(args, s: Sizes, device: torch.device) -> None:
    n_steps = args.repeats or s.grpo_steps
    s = dataclasses.replace(s, grpo_steps=n_steps)
    msgs, answers = arithmetic_messages(s.prompts * (n_steps + 2))
    print(f"\n== GRPO step: {s.prompts} prompts x {s.group} completions, <= {s.grpo_tokens} new tokens, "
          f"T=0.7, KL 0, bf16, no vLLM")
    trainer, source = ludic_grpo(args, s, device, msgs, answers)
    runs = {}
    # "no skip": every item scored and back-propagated, as if every group carried signal (random
    # weights earn no reward, so with the skip the trainer has nothing to do); same client and frames
    for label, skip in (("ludic", True), ("ludic, no skip", False)):
        trainer.cfg = trainer.cfg.model_copy(update={"skip_inert": skip})
        ludic, rollout_s, lengths = [], [], []
        for _ in range(1 + n_steps):  # a warm-up step, then the timed ones
            sync(device)
            t0 = time.perf_counter()
            trainer.train_step()
            sync(device)
            ludic.append(time.perf_counter() - t0)
            rollout_s.append(source.engine.stats["seconds"])
            rs = source.last_rollouts
            lengths.append(sum(len(st.trace.completion_token_ids) for r in rs for st in r.steps if st.trace)
                           / max(len(rs), 1))
        skipped = [h.get("skipped_items", 0.0) for h in trainer.history[-n_steps:]]
        shared = [h.get("shared_prompt_positions", 0.0) for h in trainer.history[-n_steps:]]
        runs[label] = (ludic[1:], rollout_s[1:], lengths[1:], statistics.mean(skipped), statistics.mean(shared))
    stats = trainer.publisher.client.stats
    peak = f"{gib(torch.cuda.max_memory_allocated(device))} GiB peak" if device.type == "cuda" else ""
    print(f"ludic decoded {stats['requests']} requests in {stats['batches']} batches (largest {stats['max_batch']}),"
          f" decode compile + capture {stats['compile_seconds']:.1f} s once  {peak}")
    print(f"{'trainer':<18}{'median step s':>14}{'rollout s':>10}{'mean completion':>16}{'items skipped':>15}"
          f"{'prompt positions shared':>25}")
    for label, (ludic, rollout_s, lengths, skipped, shared) in runs.items():
        print(f"{label:<18}{statistics.median(ludic):>14.3f}{statistics.median(rollout_s):>10.3f}"
              f"{statistics.mean(lengths):>16.1f}{skipped:>15.1f}{shared:>25.0f}")
    meds = {label: statistics.median(r[0]) for label, r in runs.items()}
    # TRL runs alone: both at once do not fit one 80 GB GPU (TRL scores 128 full-vocab rows at once),
    # so the two are not interleaved; ludic's model, optimizer and client copy are freed first.
    del trainer, source
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        trl_result = trl_grpo(args, s, device, msgs, answers)
    except torch.cuda.OutOfMemoryError as exc:
        print(f"{'TRL GRPOTrainer':<18}{'OOM':>14}  ({str(exc).splitlines()[0][:90]})")
        return
    if trl_result and trl_result[0]:
        steps, trl_lengths = trl_result
        trl_med = statistics.median(steps)
        mean_len = f"{statistics.mean(trl_lengths):>16.1f}" if trl_lengths else f"{'?':>16}"
        peak = f"  {gib(torch.cuda.max_memory_allocated(device))} GiB peak" if device.type == "cuda" else ""
        print(f"{'TRL GRPOTrainer':<18}{trl_med:>14.3f}{'-':>10}{mean_len}{peak}")
        for label, med in meds.items():
            print(f"ratio ({label} step s / TRL step s): {med / trl_med:.2f}x   (< 1: ludic faster)")


SECTIONS = {"trainer": section_trainer, "generate": section_generate, "grpo": section_grpo}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (cpu: with --small, to prove the code path)")
    ap.add_argument("--small", action="store_true", help="tiny model and batches (for a CPU run in minutes)")
    ap.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--repeats", type=int, help="timed steps / runs per contestant (default: per section)")
    ap.add_argument("--packed-attn", help="attention for the trainer section's packed contestant, if any: "
                    "flex_attention, sdpa (a dense document mask) or none (the default)")
    ap.add_argument("--no-compile", action="store_true", help="leave out the trainer section's compiled contestant")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak for MFU (H100 SXM: 989)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: every section at toy sizes (vocab 512), one timed run each; without CUDA it runs "
                         "the CPU twin (--device cpu) instead of skipping, and says so")
    args = ap.parse_args()
    if args.smoke:
        args.repeats = 1
        if args.device != "cpu" and not cuda_available():
            print("no CUDA: --smoke runs the CPU twin (--device cpu): it proves the code path, measures no GPU")
            args.device = "cpu"
    if args.device != "cpu" and not cuda_available():
        print("no CUDA: nothing to measure (run on a GPU machine)")
        return 0
    device = resolve_device(args.device)
    s = SMOKE if args.smoke else SMALL if args.small else FULL
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}, transformers {transformers.__version__}; "
          f"model: {s.layers} layers, hidden {s.hidden}, heads {s.heads}/{s.kv_heads}, MLP {s.intermediate}, "
          f"vocab {s.vocab} ({'smoke' if args.smoke else 'small' if args.small else 'Qwen2.5-0.5B shape'}, "
          "random weights)")
    for section in args.sections:
        SECTIONS[section](args, s, device)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
