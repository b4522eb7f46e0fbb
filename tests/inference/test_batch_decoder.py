"""BatchDecoder's slot frame: rows that join a running batch, stop strings, the fallback loop."""

import pytest
import torch

from ludic_core.inference.batch_decoder import SYNC_EVERY, BatchDecoder
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.inference.stop_strings import StopScanner


@pytest.fixture(scope="module")
def model_tok(tiny_model_and_tokenizer, device):
    model, tok = tiny_model_and_tokenizer
    return model.to(device).float().eval(), tok


def _prompts(tok, n: int) -> list[list[int]]:
    return [tok.encode(f"prompt {i}: " + "xo" * (i % 5), add_special_tokens=False) for i in range(n)]


def _teacher_forced(model, prompt, completion) -> list[float]:
    ids = torch.tensor([prompt + completion], device=next(model.parameters()).device)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(completion)]


def test_rows_joining_a_running_batch_are_exact(model_tok):
    """4 slots, 10 requests of different lengths, 6 of them arriving while the first 4 decode:
    every row's log-probs equal a teacher-forced forward of its own prompt + completion, so its
    keys, values and positions were placed right wherever and whenever it joined."""
    model, tok = model_tok
    dec = BatchDecoder(model, tok)
    dec.eos_ids = {-1}  # rows end by length: 3..12 tokens
    prompts = _prompts(tok, 10)
    requests = [(p, SamplingConfig(temperature=1.0, max_tokens=3 + i, seed=i), i) for i, p in enumerate(prompts)]
    arrivals = [requests[:4], [], requests[4:7], [], [], requests[7:]]
    out, finished_at = {}, {}

    def poll():
        return arrivals.pop(0) if arrivals else []

    def emit(key, gen):
        out[key] = gen
        finished_at[key] = dec.stats["steps"]

    dec.run(poll, emit, max_batch=4, continuous=True)
    assert sorted(out) == list(range(10))
    assert dec.stats["frames"] == 1 and dec.stats["admitted"] == 10  # all in one frame: they joined
    for i, gen in out.items():
        assert len(gen.completion_token_ids) == 3 + i and gen.finish_reason == "length"
        ref = _teacher_forced(model, prompts[i], gen.completion_token_ids)
        assert max(abs(a - b) for a, b in zip(ref, gen.completion_logprobs)) < 1e-4
    assert finished_at[0] < finished_at[3]  # a short row is answered before the batch's slowest


def test_joined_row_samples_what_it_samples_alone(model_tok):
    """Counter-based seeds: a row's tokens depend on its own seed, not on when or beside whom it ran."""
    model, tok = model_tok
    prompts = _prompts(tok, 6)
    samplings = [SamplingConfig(temperature=0.8, max_tokens=6 + i, seed=100 + i) for i in range(6)]
    alone = [BatchDecoder(model, tok).generate([p], [s])[0] for p, s in zip(prompts, samplings)]
    dec = BatchDecoder(model, tok)
    arrivals = [[(prompts[0], samplings[0], 0), (prompts[1], samplings[1], 1)],
                [(p, s, i) for i, (p, s) in enumerate(zip(prompts, samplings)) if i >= 2]]
    out = {}
    dec.run(lambda: arrivals.pop(0) if arrivals else [], lambda k, g: out.__setitem__(k, g), max_batch=2)
    for i, gen in enumerate(alone):
        assert out[i].completion_token_ids == gen.completion_token_ids


def test_finished_rows_stop_costing_steps(model_tok):
    """Rows of one batch that finish at different lengths: each eager step runs only the rows still
    decoding (the last occupied slots move into freed ones), and every row still decodes exactly
    (its own seed's tokens, teacher-forced log-probs)."""
    model, tok = model_tok
    prompts = _prompts(tok, 8)
    # rows finish out of slot order (slots free below live ones); the last, moved early, outlives the horizon
    lengths = [9, 2, 16, 5, 12, 3, 7, 40]
    samplings = [SamplingConfig(temperature=1.0, max_tokens=n, seed=50 + i) for i, n in enumerate(lengths)]
    dec = BatchDecoder(model, tok, compile=False)
    dec.eos_ids = {-1}
    gens = dec.generate(prompts, samplings)
    # the first token comes from the prefill; a row of n tokens is stepped n - 1 times, then never again
    assert dec.stats["steps"] == max(lengths) - 1
    assert dec.stats["slot_steps"] == sum(n - 1 for n in lengths)
    for p, s, gen in zip(prompts, samplings, gens):
        assert len(gen.completion_token_ids) == s.max_tokens
        assert gen.completion_token_ids == BatchDecoder(model, tok).generate([p], [s])[0].completion_token_ids
        ref = _teacher_forced(model, p, gen.completion_token_ids)
        assert max(abs(a - b) for a, b in zip(ref, gen.completion_logprobs)) < 1e-4


def test_identical_prompts_are_prefilled_once_and_sampled_apart(model_tok):
    """A GRPO group shares its prompt: one prefill row for it, yet each completion is its own
    exact sample (teacher-forced log-probs) from its own seed."""
    model, tok = model_tok
    shared, other = _prompts(tok, 2)
    prompts = [shared, shared, shared, other]
    seen = []
    hook = model.register_forward_pre_hook(lambda _m, args, kw: seen.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        gens = BatchDecoder(model, tok).generate(
            prompts, [SamplingConfig(temperature=1.0, max_tokens=8, seed=i) for i in range(4)])
    finally:
        hook.remove()
    assert seen[0][0] == 2  # the prefill: two distinct prompts
    assert len({tuple(g.completion_token_ids) for g in gens[:3]}) > 1
    for p, g in zip(prompts, gens):
        ref = _teacher_forced(model, p, g.completion_token_ids)
        assert max(abs(a - b) for a, b in zip(ref, g.completion_logprobs)) < 1e-4


def test_common_prefix_leaves_every_prompt_a_token_of_its_own():
    from ludic_core.inference.decode_frame import _common_prefix

    assert _common_prefix([(1, 2, 3, 4), (1, 2, 3, 5), (1, 2, 9)]) == 2
    assert _common_prefix([(1, 2, 3), (1, 2, 3, 4)]) == 2  # not 3: the shorter one keeps its last token
    assert _common_prefix([(7, 1), (8, 1)]) == 0
    assert _common_prefix([(5, 6, 7)]) == 2


@pytest.mark.parametrize("continuous", [False, True])
def test_a_shared_opening_is_prefilled_once(model_tok, monkeypatch, continuous):
    """Prompts that open alike (a system prompt) run that opening once, as one row, and the rest of
    each prompt against it: every sample is still exact (teacher-forced log-probs), wherever its
    slot is, and identical prompts still share one row."""
    import ludic_core.inference.decode_frame as decode_frame

    monkeypatch.setattr(decode_frame, "forward_cost_tokens", lambda device: 16)  # share on any device
    model, tok = model_tok
    system = tok.encode("You play tic-tac-toe as X. Reply with the cell to mark. " * 2, add_special_tokens=False)
    prompts = [system + tok.encode(f"{i}: board " + "xo" * i, add_special_tokens=False) for i in range(4)]
    prompts.append(prompts[1])  # an identical prompt: no row of its own
    seen = []
    hook = model.register_forward_pre_hook(lambda _m, args, kw: seen.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    dec = BatchDecoder(model, tok)
    requests = [(p, SamplingConfig(temperature=1.0, max_tokens=6 + i, seed=i), i) for i, p in enumerate(prompts)]
    arrivals = [requests[:3], requests[3:]]
    out = {}
    try:
        dec.run(lambda: arrivals.pop(0) if arrivals else [], lambda k, g: out.__setitem__(k, g), max_batch=8,
                continuous=continuous)
    finally:
        hook.remove()
    assert seen[:2] == [(1, len(system)), (3, max(len(p) for p in prompts[:3]) - len(system))]
    later = [shape for shape in seen[2:] if shape[1] > 1]  # the second arrival's prefills
    if continuous:  # each joined a running batch alone, as a slot freed: nothing to share with
        assert [b for b, _ in later] == [1, 1]
    else:  # a new batch of two
        assert later == [(1, len(system)), (2, max(len(p) for p in prompts[3:]) - len(system))]
    for i, p in enumerate(prompts):
        ref = _teacher_forced(model, p, out[i].completion_token_ids)
        assert len(ref) == 6 + i
        assert max(abs(a - b) for a, b in zip(ref, out[i].completion_logprobs)) < 1e-4


def test_without_continuous_batching_arrivals_wait_for_the_next_frame(model_tok):
    model, tok = model_tok
    dec = BatchDecoder(model, tok)
    dec.eos_ids = {-1}
    prompts = _prompts(tok, 4)
    arrivals = [[(prompts[0], SamplingConfig(max_tokens=8, seed=0), 0)],
                [(p, SamplingConfig(max_tokens=4, seed=i), i) for i, p in enumerate(prompts) if i]]
    out = {}
    dec.run(lambda: arrivals.pop(0) if arrivals else [], lambda k, g: out.__setitem__(k, g), max_batch=4,
            continuous=False)
    assert sorted(out) == [0, 1, 2, 3]
    # two frames, one after the other (CUDA-graph steps are read every SYNC_EVERY: whole multiples)
    every = SYNC_EVERY if dec._compile_mode() == "reduce-overhead" else 1
    assert dec.stats["steps"] == -(-7 // every) * every + -(-3 // every) * every


def test_dynamic_fallback_matches_the_slot_frame(model_tok):
    """Models the frame cannot serve decode on the old dynamic-cache loop: same tokens, same log-probs."""
    model, tok = model_tok
    prompts = _prompts(tok, 5)
    samplings = [SamplingConfig(temperature=0.7, max_tokens=10, seed=i) for i in range(5)]
    fast = BatchDecoder(model, tok).generate(prompts, samplings)
    slow_dec = BatchDecoder(model, tok)
    slow_dec.fast = False
    slow = slow_dec.generate(prompts, samplings)
    for a, b in zip(fast, slow):
        assert a.completion_token_ids == b.completion_token_ids
        assert max(abs(x - y) for x, y in zip(a.completion_logprobs, b.completion_logprobs)) < 1e-4
        assert a.finish_reason == b.finish_reason and a.text == b.text


def test_stop_scanner_finds_the_first_completing_token_incrementally(model_tok):
    _, tok = model_tok
    ids = tok.encode("abc STOP def STOP", add_special_tokens=False)
    first = len(tok.encode("abc STOP", add_special_tokens=False)) - 1
    whole = StopScanner(tok, ["STOP"]).scan(ids)
    chunked = StopScanner(tok, ["STOP"])
    hits = [chunked.scan(ids[:n]) for n in range(1, len(ids) + 1, 3)]  # a row ends at its first hit
    assert whole == first
    assert [h for h in hits if h is not None][0] == first
    assert StopScanner(tok, ["STOP"]).cut(ids[:first + 1]) == "abc "
    assert StopScanner(tok, ["zzz"]).scan(ids) is None
    assert StopScanner(tok, []).scan(ids) is None


@pytest.mark.heavy
def test_compiled_decode_step_is_exact(model_tok):
    """The compiled step (CUDA graphs on a GPU; inductor on the CPU, ~15 s to compile) samples
    what teacher forcing scores, and a second call reuses the compiled bucket."""
    model, tok = model_tok
    dec = BatchDecoder(model, tok, compile=True)
    prompts = _prompts(tok, 6)
    samplings = [SamplingConfig(temperature=0.7, max_tokens=12, seed=i) for i in range(6)]
    gens = dec.generate(prompts, samplings)
    spent = dec.stats["compile_seconds"]
    assert spent > 0
    assert all(f.compile_mode is not None for f in dec._frames.values())  # compiled, not fallen back to eager
    again = dec.generate(prompts, samplings)
    assert dec.stats["compile_seconds"] == spent  # same bucket: no second compile
    for p, g, h in zip(prompts, gens, again):
        assert g.completion_token_ids == h.completion_token_ids
        ref = _teacher_forced_at(model, p, g.completion_token_ids, 0.7)
        assert max(abs(a - b) for a, b in zip(ref, g.completion_logprobs)) < 1e-4


def _teacher_forced_at(model, prompt, completion, temperature) -> list[float]:
    ids = torch.tensor([prompt + completion], device=next(model.parameters()).device)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float() / temperature, -1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(completion)]


def test_eager_attention_models_get_an_additive_mask(tiny_model_dir, device):
    """attn_implementation="eager" adds its mask to the scores (SDPA takes a boolean one)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager").to(device).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    dec = BatchDecoder(model, tok)
    assert dec.fast and dec.additive_mask
    prompts = _prompts(tok, 3)
    gens = dec.generate(prompts, [SamplingConfig(temperature=1.0, max_tokens=6 + i, seed=i) for i in range(3)])
    for p, g in zip(prompts, gens):
        ref = _teacher_forced(model, p, g.completion_token_ids)
        assert max(abs(a - b) for a, b in zip(ref, g.completion_logprobs)) < 1e-4


@pytest.mark.heavy  # nine traces of the model: 1.5-3 minutes on 2 cores
def test_every_bucket_compiles_past_torchs_default_limit_of_eight(model_tok, monkeypatch, recording_compile):
    """A long run meets many buckets (slots x columns), each one compile of the same step.
    torch stops compiling a function after 8 by default and then runs it eagerly, silently;
    every bucket here must still get its own graphs. (An eager backend stands in for inductor:
    what is checked is that dynamo compiles, not what it compiles to.)"""
    import torch._dynamo

    graphs = recording_compile
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)  # torch's default, whatever ran before
    model, tok = model_tok
    dec = BatchDecoder(model, tok, compile=True)
    new_graphs = []
    for slots in (1, 2, 4):
        for columns in (64, 128, 256):  # 9 buckets: one more than torch's default allows
            frame = dec._frame(slots, columns)
            frame.compile_mode = "default"  # compiled on the CPU too
            frame.admit([dec._row(p, SamplingConfig(temperature=1.0, max_tokens=4, seed=i), i)
                         for i, p in enumerate(_prompts(tok, slots))])
            before = len(graphs)
            frame.step()
            new_graphs.append(len(graphs) - before)
    torch._dynamo.reset()
    assert all(n > 0 for n in new_graphs), f"buckets that ran eagerly: {new_graphs}"


def test_a_compiled_step_attends_through_decode_attention(tiny_model_and_tokenizer, device, recording_compile):
    """Under compile a grouped-query model's step hands SDPA each KV group's query heads as
    that group's positions (`grouped_attention`, through `DecodeForward` or, for other
    models, `decode_attention`): no KV head is copied out per query head,
    and the samples are still what teacher forcing scores. (An eager backend stands in for
    inductor: the graph is what is checked.)"""
    import torch._dynamo
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = tiny_model_and_tokenizer
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    model = model.to(device).eval()
    graphs = recording_compile
    dec = BatchDecoder(model, tok, compile=True)
    prompts = _prompts(tok, 3)
    gens = dec.generate(prompts, [SamplingConfig(temperature=0.7, max_tokens=8, seed=i) for i in range(3)])
    torch._dynamo.reset()
    calls = [n for g in graphs for n in g.graph.nodes
             if n.op == "call_function" and "scaled_dot_product" in str(n.target)]
    assert len(calls) == 2  # one per layer
    for n in calls:
        q, k = (a.meta["example_value"].shape for a in n.args[:2])
        assert (q[1], q[2], k[1]) == (2, 2, 2)  # [B, KV groups, query heads per group, D] against 2 KV heads
    assert model.config._attn_implementation == "sdpa"  # restored after each step
    for p, g in zip(prompts, gens):
        ref = _teacher_forced_at(model, p, g.completion_token_ids, 0.7)
        assert max(abs(a - b) for a, b in zip(ref, g.completion_logprobs)) < 1e-4
