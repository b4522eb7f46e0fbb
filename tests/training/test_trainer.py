"""Trainer behaviour on the tiny model: learning, accumulation, staleness, publishing, resume."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ludic_core.algorithms import make_grpo, make_sft
from ludic_core.batching.saw import SAWBatch
from ludic_core.batching.sources import OfflineBatchSource
from ludic_core.config import LoRAConfig, TrainerConfig
from ludic_core.inference import LocalChatClient
from ludic_core.models import load_model_and_tokenizer
from ludic_core.publish import InProcessPublisher
from ludic_core.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


def _trainer(model_dir, items, **cfg) -> Trainer:
    model, tok = load_model_and_tokenizer(model_dir)
    cfg = {"lr": 3e-3, "micro_token_budget": 8192, "max_seq_len": 512, "dtype": "float32", **cfg}
    return Trainer(model, make_sft(), OfflineBatchSource(items, batch_size=8, seed=0),
                   TrainerConfig(**cfg), tokenizer=tok)


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.full_weights().items()}


def _max_diff(a, b) -> float:
    return max(float((a[k].cpu() - b[k].cpu()).abs().max()) for k in a)


def test_sft_loss_goes_down(tiny_model_dir, sft_items):
    tr = _trainer(tiny_model_dir, sft_items)
    hist = tr.train(15)
    assert tr.step == 15
    assert hist[-1]["loss"] < 0.6 * hist[0]["loss"], (hist[0]["loss"], hist[-1]["loss"])


def test_micro_batching_does_not_change_the_gradient(tiny_model_dir, sft_items):
    one = _trainer(tiny_model_dir, sft_items, micro_token_budget=100_000)
    many = _trainer(tiny_model_dir, sft_items, micro_token_budget=200)
    h1, hm = one.train(2), many.train(2)
    assert h1[-1]["micro_batches"] == 1 and hm[-1]["micro_batches"] >= 3
    # Same loss (normalised by whole-step totals) and, up to fp32 summation order
    # amplified by Adam's per-coordinate normalisation, the same weights.
    assert [h["loss"] for h in hm] == pytest.approx([h["loss"] for h in h1], rel=1e-5)
    assert _max_diff(_weights(one), _weights(many)) < 1e-4


def test_ratio_losses_refuse_items_without_actor_logprobs(tiny_model_dir, sft_items):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    tr = Trainer(model, make_grpo(), OfflineBatchSource(sft_items, batch_size=4), TrainerConfig(), tokenizer=tok)
    with pytest.raises(ValueError, match="grpo needs the actor's sampling log-probs"):
        tr.train_step()


def test_a_failed_step_is_reported_to_a_source_that_records_failures(tiny_model_dir, sft_items):
    """A queue source quotes this error if the entries fail again (their dead-letter reason)."""
    class _Recording(_FixedSource):
        failures: list = []

        def record_failure(self, error):
            self.failures.append(error)

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    src = _Recording(SAWBatch(sft_items[:4]))
    tr = Trainer(model, make_grpo(), src, TrainerConfig(), tokenizer=tok)
    with pytest.raises(ValueError, match="grpo needs the actor's sampling log-probs") as caught:
        tr.train_step()
    assert src.failures == [caught.value]


def test_overlong_items_error_or_drop(tiny_model_dir, sft_items):
    longest = max(len(i) for i in sft_items)
    tr = _trainer(tiny_model_dir, sft_items, max_seq_len=longest - 1)
    with pytest.raises(ValueError, match=f"exceed max_seq_len={longest - 1}"):
        tr.train(1)


class _FixedSource:
    def __init__(self, batch): self.batch = batch
    def next_batch(self): return SAWBatch(items=list(self.batch.items), meta={})
    def state_dict(self): return {}
    def load_state_dict(self, s): pass


def test_stale_items_are_dropped_and_counted(tiny_model_dir, sft_items):
    items = [type(i)(**{**i.__dict__, "meta": {**i.meta, "policy_version": v}})
             for i, v in zip(sft_items[:6], [0, 0, 3, 3, 5, 5])]
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    tr = Trainer(model, make_sft(), _FixedSource(SAWBatch(items)), TrainerConfig(max_lag=1), tokenizer=tok)
    tr.policy_version = 5  # items at versions 0 and 3 are more than 1 version stale
    m = tr.train_step()
    assert m["stale_dropped"] == 4 and m["items"] == 2


def test_publishing_pushes_weights_and_versions(tiny_model_dir, sft_items):
    client = LocalChatClient(tiny_model_dir)
    tr = _trainer(tiny_model_dir, sft_items, sync_every_steps=2)
    tr.publisher = InProcessPublisher(client)
    tr.train(1)
    assert client.policy_version == 0
    tr.train(2)
    assert client.policy_version == 2 and tr.policy_version == 2
    published = client.model.state_dict()  # bf16 under `auto` on a GPU: the push casts, exactly
    assert _max_diff({k: v.to(published[k].dtype) for k, v in _weights(tr).items()}, published) == 0.0


def test_lora_trains_adapters_and_publishes_merged_weights(tiny_model_dir, sft_items):
    base, _ = load_model_and_tokenizer(tiny_model_dir)
    tr = _trainer(tiny_model_dir, sft_items, lora=LoRAConfig(r=4, alpha=8), lr=1e-2)
    trainable = [n for n, p in tr.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    tr.train(3)
    merged = tr.full_weights()
    assert set(merged) == set(base.state_dict())
    assert _max_diff(merged, base.state_dict()) > 1e-4  # q/k/v/o changed through the adapters
    assert torch.equal(merged["lm_head.weight"].cpu(), base.state_dict()["lm_head.weight"])  # frozen


@pytest.mark.slow
def test_sigkill_and_resume_matches_a_straight_run(tiny_model_dir, tmp_path):
    """4 steps straight vs 2 steps + SIGKILL + resume + 2 steps: same weights."""
    script = ROOT / "tests" / "training" / "_worker_resume.py"

    def run(ckpt: Path, until: int, kill: bool) -> subprocess.CompletedProcess:
        args = [sys.executable, str(script), str(tiny_model_dir), str(ckpt), str(until)] + (["--kill"] if kill else [])
        return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)

    straight = run(tmp_path / "a", 4, kill=False)
    assert straight.returncode == 0, straight.stderr
    killed = run(tmp_path / "b", 2, kill=True)
    assert killed.returncode == -9, killed.stderr  # really SIGKILLed, no cleanup ran
    resumed = run(tmp_path / "b", 4, kill=False)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at step 2" in resumed.stdout
    from safetensors.torch import load_file

    a = load_file(tmp_path / "a" / "step_00000004" / "model" / "model.safetensors")
    b = load_file(tmp_path / "b" / "step_00000004" / "model" / "model.safetensors")
    assert _max_diff(a, b) < 1e-6


@pytest.mark.parametrize("temperature", [0.5, 1.0])
def test_first_rl_step_ratio_is_one_at_any_sampling_temperature(tiny_model_dir, temperature):
    """Actor log-probs are of softmax(logits / T); the trainer must score the same
    distribution, or every ratio is off and clipping silently eats the gradient."""
    from ludic_core.batching.sources import RolloutBatchSource
    from ludic_core.recipes.tic_tac_toe import tic_tac_toe_engine, tic_tac_toe_requests
    from ludic_core.rollout import GRPORequestStrategy

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    client = LocalChatClient(*load_model_and_tokenizer(tiny_model_dir), dtype="float32")  # exact on any device
    grpo = make_grpo(group_size=4)
    source = RolloutBatchSource(
        tic_tac_toe_engine(client), lambda i: tic_tac_toe_requests(4, seed=7, temperature=temperature),
        grpo, max_steps=9, strategy=GRPORequestStrategy(4, seed=0), max_seq_len=512)
    batch = source.next_batch()
    assert {it.meta["sampling_temperature"] for it in batch.items} == {temperature}
    trainer = Trainer(model, grpo, OfflineBatchSource(batch.items, batch_size=len(batch.items), seed=0),
                      # score every item: groups of equal rewards have advantage 0, which the trainer
                      # would otherwise skip (unscored, they would have no ratio to check)
                      TrainerConfig(lr=1e-4, micro_token_budget=8192, max_seq_len=512, dtype="float32",
                                    skip_inert=False),
                      tokenizer=tok)
    m = trainer.train_step()
    assert abs(m["ratio_max"] - 1.0) < 1e-3 and abs(m["ratio_min"] - 1.0) < 1e-3, m
    assert m["clip_frac"] == 0.0


def test_temperature_set_on_the_agent_is_recorded_per_step(tiny_model_dir):
    """No per-request spec: the agent's own InferenceSpec decides the temperature,
    and that is what must reach the trainer (not a guessed 1.0)."""
    import asyncio

    from ludic_core.agents import Agent
    from ludic_core.batching.collate import collate_micro_batches
    from ludic_core.batching.saw import build_saw_batch
    from ludic_core.context import SlidingWindowContext
    from ludic_core.envs import TicTacToeEnv
    from ludic_core.inference import InferenceSpec, SamplingConfig
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.parsers import xml_tag_parser
    from ludic_core.rollout import EnvConfig, ProtocolSpec, RolloutEngine, RolloutRequest

    client = LocalChatClient(*load_model_and_tokenizer(tiny_model_dir))
    spec = InferenceSpec(sampling=SamplingConfig(temperature=0.6, max_tokens=24))
    engine = RolloutEngine({"t": TicTacToeEnv}, {"p": lambda: SingleAgentSyncProtocol(
        Agent(client, parser=xml_tag_parser("move"), context=SlidingWindowContext(1), inference=spec))})
    rollouts = asyncio.run(engine.generate_rollouts(
        [RolloutRequest(env=EnvConfig(name="t"), protocol=ProtocolSpec(kind="p"), env_seed=i, sampling_seed=i)
         for i in range(3)], max_steps=9))
    items = build_saw_batch(rollouts, [[1.0] * len(r.steps) for r in rollouts]).items
    assert items and {it.meta["sampling_temperature"] for it in items} == {0.6}
    mb = collate_micro_batches(items, micro_token_budget=8192, pad_id=0)[0]
    assert torch.allclose(mb.temperatures, torch.full((len(mb.meta),), 0.6))


@pytest.mark.parametrize("fused", [True, False])
def test_lean_logprobs_give_the_full_vocab_loss_and_gradient(tiny_model_dir, device, fused):
    """The trainer scores only positions from the first action on, in chunks, at each row's
    sampling temperature, either straight from hidden states (fused: no logits at all) or
    from the model's logits (`logits_to_keep`): the loss and the gradient must equal the
    plain formula over every position (a full fp32 log-softmax of logits / T)."""
    from ludic_core.batching.collate import collate_micro_batches
    from ludic_core.batching.saw import SAWItem
    from ludic_core.losses import LossInputs

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    g = torch.Generator().manual_seed(0)
    items = []
    for prompt, completion, temp, adv in ((40, 9, 0.7, 1.0), (55, 5, 0.5, -0.5), (47, 12, 1.0, 0.25)):
        n = prompt + completion
        ids = torch.randint(4, 200, (n,), generator=g).tolist()
        lps = [0.0] * prompt + (-torch.rand(completion, generator=g) * 4).tolist()
        items.append(SAWItem(ids, [1] * n, [0] * prompt + [1] * completion, adv,
                             {"sampling_temperature": temp}, actor_logprobs=lps))
    grpo = make_grpo()
    tr = Trainer(model, grpo, None, TrainerConfig(dtype="float32", logprob_chunk_tokens=7), tokenizer=tok)
    assert tr.scorer.fused  # a Llama: logits are lm_head(decoder output)
    if not fused:
        tr.scorer.head = None
    mb = collate_micro_batches(items, micro_token_budget=10**6, pad_id=tr.pad_id)[0]
    totals = {"tokens": mb.action_tokens, "sequences": 3.0, "mean_weight": float(mb.weights.mean())}
    widths = []
    hook = tr.model.lm_head.register_forward_hook(lambda m, inp, out: widths.append(inp[0].shape[1]))
    loss, _ = tr._forward_loss(mb, totals)
    hook.remove()
    if fused:  # the model's lm_head ran on the last position only (and once more to verify that)
        assert widths == [1, 1] and tr.scorer.fused
    else:  # logits from position 39 (first action - 1) on
        assert widths == [mb.input_ids.shape[1] - 39]
    loss.backward()
    lean = {n: p.grad.clone() for n, p in tr.model.named_parameters()}
    tr.model.zero_grad()

    dev = tr.ctx.device
    logits = tr.model(input_ids=mb.input_ids.to(dev), attention_mask=mb.attention_mask.to(dev)).logits
    z = torch.log_softmax(logits.float() / mb.temperatures.to(dev)[:, None, None], dim=-1)
    logp = z[:, :-1].gather(-1, mb.input_ids.to(dev)[:, 1:, None]).squeeze(-1)
    ref = grpo.loss(LossInputs(logprobs=logp, old_logprobs=mb.actor_logprobs[:, 1:].to(dev),
                               mask=mb.action_mask[:, 1:].to(dev), advantages=mb.weights.to(dev),
                               num_tokens=totals["tokens"], num_sequences=3.0,
                               batch_mean_advantage=totals["mean_weight"])).loss
    ref.backward()
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), abs=1e-6) and abs(float(ref.detach())) > 1e-3
    assert float(tr.model.lm_head.weight.grad.abs().max()) > 1e-4
    for n, p in tr.model.named_parameters():
        assert torch.allclose(lean[n], p.grad, atol=1e-6), n


def test_a_model_whose_logits_are_not_lm_head_of_its_hidden_states_is_scored_from_its_logits(tiny_model_dir):
    """E.g. logit soft-capping: the first micro-batch's check catches it, the scorer falls back
    to the model's own logits, and the log-probs are those of the model's real output."""
    from ludic_core.training.scoring import PolicyScorer

    model, _ = load_model_and_tokenizer(tiny_model_dir)

    def softcap(_module, _args, out):
        out.logits = 3.0 * torch.tanh(out.logits / 3.0)
        return out

    model.register_forward_hook(softcap)
    scorer = PolicyScorer(model, device_type="cpu", compute_dtype=torch.float32, chunk_tokens=5)
    assert scorer.fused  # nothing in the config says otherwise
    ids = torch.randint(4, 200, (2, 12))
    got, _ = scorer(ids, torch.ones_like(ids), 4, None, need_entropy=False)
    assert not scorer.fused
    want = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[:, 4:-1].gather(-1, ids[:, 5:, None])[..., 0]
    assert torch.allclose(got, want, atol=1e-5)
    model.config.final_logit_softcapping = 30.0  # a config that declares it: never fused
    assert not PolicyScorer(model, device_type="cpu", compute_dtype=torch.float32, chunk_tokens=5).fused


@pytest.mark.parametrize("fused", [True, False])
def test_scoring_builds_no_kv_cache(tiny_model_dir, fused):
    """A training forward never decodes on: a KV cache would be a copy of every layer's keys and values."""
    from ludic_core.training.scoring import PolicyScorer

    model, _ = load_model_and_tokenizer(tiny_model_dir)
    scorer = PolicyScorer(model, device_type="cpu", compute_dtype=torch.float32, chunk_tokens=64)
    if not fused:
        scorer.head = None
    caches = []
    hook = model.register_forward_hook(lambda m, a, out: caches.append(out.past_key_values))
    ids = torch.randint(4, 200, (2, 12), generator=torch.Generator().manual_seed(0))
    logprobs, _ = scorer(ids, torch.ones_like(ids), 3, None, need_entropy=False)
    hook.remove()
    assert logprobs.shape == (2, 8) and caches and all(c is None for c in caches)
