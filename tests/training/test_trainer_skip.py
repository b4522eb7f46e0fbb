"""Items inert at zero advantage get no forward pass, and the step is the unskipped one:
same gradient, same weights after an all-skipped step, metrics that count what was skipped.
And no micro-batch reads a device tensor on the host."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ludic_core.algorithms import make_cispo, make_grpo, make_gspo, make_reinforce, make_reinforce_baseline
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import DynamicSampling, TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training import micro_batch_scoring as micro_batch_scoring_module
from ludic_core.training import micro_batches as micro_batches_module
from ludic_core.training import trainer as trainer_module
from ludic_core.training.trainer import Trainer
from ludic_core.types import Rollout, Step, TokenTrace
from tests.host_syncs import SyncCounter

REPO = Path(__file__).resolve().parents[2]
SKIP_WORKER = Path(__file__).with_name("_worker_skip.py")

# zero weight at i = 1, 4, 7, whose completions have 4 + i % 5 = 5, 8, 6 tokens: 19 skipped
WEIGHTS = [1.0, 0.0, -1.0, 0.5, 0.0, -0.5, 1.0, 0.0, -1.0, 0.3]


class _Batches:
    """Hands out the given batches in turn (the last one again and again)."""

    def __init__(self, *batches: SAWBatch): self.batches = list(batches)
    def next_batch(self): return self.batches.pop(0) if len(self.batches) > 1 else self.batches[0]
    def state_dict(self): return {}
    def load_state_dict(self, s): pass


def _items(weights) -> list[SAWItem]:
    """Random sequences (prompt 20 + i, completion 4 + i % 5 tokens) whose recorded actor
    log-probs are far from the model's: ratios are not 1, some are clipped."""
    g = torch.Generator().manual_seed(1)
    items = []
    for i, w in enumerate(weights):
        prompt, completion = 20 + i, 4 + i % 5
        ids = torch.randint(4, 200, (prompt + completion,), generator=g).tolist()
        lps = [0.0] * prompt + (-torch.rand(completion, generator=g) * 8).tolist()
        items.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion, w,
                             {"sampling_temperature": 1.0}, actor_logprobs=lps))
    return items


def _trainer(model_dir, algorithm, *batches, skip: bool, **cfg) -> Trainer:
    model, tok = load_model_and_tokenizer(model_dir)
    cfg = {"dtype": "float32", "micro_token_budget": 100_000, "max_seq_len": 512, "max_grad_norm": None, **cfg}
    return Trainer(model, algorithm, _Batches(*batches), TrainerConfig(skip_inert=skip, **cfg), tokenizer=tok)


def _step_with_grads(tr: Trainer) -> tuple[dict, dict[str, torch.Tensor]]:
    """One step's metrics and the gradients the optimizer stepped with."""
    grads: dict[str, torch.Tensor] = {}
    hook = tr.optimizer.register_step_pre_hook(lambda *_: grads.update(
        {n: p.grad.detach().clone() for n, p in tr.model.named_parameters() if p.grad is not None}))
    try:
        return tr.train_step(), grads
    finally:
        hook.remove()


def _assert_same_grads(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    scale = max(float(g.abs().max()) for g in a.values())
    assert scale > 1e-6  # the comparison is not 0 == 0
    diff = max(float((a[k] - b[k]).abs().max()) for k in a)
    # cuBLAS and SDPA pick their kernels (and so their summation order) by shape, and skipping or
    # sharing rows changes the shapes: on an H200 the two sides differed by up to 5.7e-4 of the
    # largest gradient (a KL reference, or 8 updates of rollout reuse); a wrong gradient is off by O(1)
    rel = 1e-5 if next(iter(a.values())).device.type == "cpu" else 1e-3
    assert diff <= rel * scale, (diff, scale)


INERT = {
    "grpo": lambda: make_grpo(),
    "grpo_sequence_reduction": lambda: make_grpo(loss_reduction="sequence"),
    "grpo_seq_tis": lambda: make_grpo(clip_high=0.28, sampler_correction="seq_tis"),
    "gspo": lambda: make_gspo(clip_low=0.5, clip_high=2.0),  # wide: ratios this far from 1 must not all clip
    "cispo": lambda: make_cispo(),
    "reinforce": lambda: make_reinforce(),
}
NOT_INERT = {
    "grpo_kl": lambda: make_grpo(kl_coef=0.1),
    "grpo_entropy": lambda: make_grpo(entropy_coef=0.01),
    "reinforce_baseline": lambda: make_reinforce_baseline(),
}


@pytest.mark.parametrize("name", sorted(INERT) + sorted(NOT_INERT))
def test_skipping_leaves_the_gradient_unchanged(tiny_model_dir, name):
    make = INERT.get(name) or NOT_INERT[name]
    batch = SAWBatch(_items(WEIGHTS))
    (on, g_on), (off, g_off) = (_step_with_grads(_trainer(tiny_model_dir, make(), batch, skip=s)) for s in (True, False))
    _assert_same_grads(g_on, g_off)
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-5, abs=1e-7)
    assert on["grad_norm"] == pytest.approx(off["grad_norm"], rel=1e-5)
    assert off["skipped_items"] == off["skipped_tokens"] == 0.0
    assert on["items"] == off["items"] == 10
    if name in INERT:
        assert (on["skipped_items"], on["skipped_tokens"]) == (3.0, 19.0)
    else:  # a KL or entropy term (or the baseline) trains on zero-advantage items too
        assert on["skipped_items"] == on["skipped_tokens"] == 0.0


def _rollout(group: str, reward: float, completion: int, seed: int) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(4, 200, (12,), generator=g).tolist()
    trace = TokenTrace(prompt, torch.randint(4, 200, (completion,), generator=g).tolist(),
                       (-torch.rand(completion, generator=g) * 6).tolist(), policy_version=0)
    step = Step(index=0, prev_obs="", action="", next_obs=None, reward=reward, terminated=True, trace=trace)
    return Rollout(steps=[step], meta={"group_id": group})


def test_dynamic_sampling_and_skipping_work_together(tiny_model_dir):
    """DAPO: the zero-variance group is dropped before credit; inside the groups kept, the
    rollout whose reward is its group's mean has advantage exactly 0 and is skipped."""
    rollouts = [
        _rollout("a", 1.0, 5, 0), _rollout("a", 0.0, 6, 1), _rollout("a", 0.5, 7, 2),  # mean 0.5: A = 0 for the 7
        _rollout("b", 1.0, 4, 3), _rollout("b", 1.0, 4, 4), _rollout("b", 1.0, 4, 5),  # all equal: dropped
        _rollout("c", 0.0, 3, 6), _rollout("c", 1.0, 8, 7), _rollout("c", 0.5, 6, 8),  # A = 0 for the 6
    ]
    dapo = make_grpo(clip_high=0.28, dynamic_sampling=DynamicSampling(min_groups=2))
    batch = dapo.prepare(rollouts)
    assert batch.meta["groups_filtered"] == 1 and len(batch) == 6
    (on, g_on), (off, g_off) = (_step_with_grads(_trainer(tiny_model_dir, dapo, batch, skip=s)) for s in (True, False))
    _assert_same_grads(g_on, g_off)
    assert on["groups_filtered"] == 1
    assert (on["skipped_items"], on["skipped_tokens"]) == (2.0, 7 + 6)
    assert on["ratio_max"] > 1.0  # scored, with ratios that are not 1


def test_skipped_items_get_no_forward_pass(tiny_model_dir):
    """A budget below two items makes one micro-batch per item: 7 forwards of one row, not 10."""
    for skip, scored in ((True, 7), (False, 10)):
        tr = _trainer(tiny_model_dir, make_grpo(), SAWBatch(_items(WEIGHTS)), skip=skip, micro_token_budget=40)
        rows: list[int] = []
        tr.model.register_forward_pre_hook(  # training forwards (not the once-per-run no-grad checks)
            lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]) if torch.is_grad_enabled() else None,
            with_kwargs=True)
        m = tr.train_step()
        assert rows == [1] * scored and m["micro_batches"] == scored


def test_a_step_with_every_item_skipped_moves_the_weights_as_the_unskipped_one(tiny_model_dir):
    """The unskipped step's gradient is exactly 0; AdamW still decays its moments and the
    weights. Skipped, no forward runs, and the zero gradient must be given explicitly."""
    first, dead = SAWBatch(_items([1.0, -1.0, 0.5, -0.5, 1.0, -1.0])), SAWBatch(_items([0.0] * 6))
    after = {}
    for skip in (True, False):
        tr = _trainer(tiny_model_dir, make_grpo(), first, dead, skip=skip, lr=1e-2, weight_decay=0.1)
        tr.train_step()  # Adam moments from a real gradient
        before = {k: v.clone() for k, v in tr.full_weights().items()}
        m = tr.train_step()
        after[skip] = tr.full_weights()
        assert m["micro_batches"] == (0 if skip else 1) and m["skipped_items"] == (6 if skip else 0)
        assert m["grad_norm"] == 0.0 and m["loss"] == 0.0
        assert max(float((after[skip][k] - before[k]).abs().max()) for k in before) > 1e-4  # momentum moved them
    for k in after[True]:
        assert torch.equal(after[True][k], after[False][k]), k


def _sync_count(model_dir, budget: int, monkeypatch, items: list[SAWItem] | None = None
                ) -> tuple[int, list[str], float, dict]:
    """Host reads in a step's second step: (count, where, micro-batches, the step's metrics)."""
    batch = SAWBatch(items if items is not None else _items(WEIGHTS))
    tr = _trainer(model_dir, make_grpo(kl_coef=0.1, entropy_coef=0.01), batch, skip=True,
                  micro_token_budget=budget, max_grad_norm=1.0)
    tr.train_step()  # the scorer's one-off check of its fused path runs here
    counter = SyncCounter(tr.model.parameters())
    # every host -> device copy a step makes
    for module in (trainer_module, micro_batches_module, micro_batch_scoring_module):
        monkeypatch.setattr(module, "to_device", lambda t, device: counter.mark(t.to(device, copy=True)))

    def pause(*_):  # the models' own internals (HF's mask builder reads one) are not the trainer's
        counter.paused += 1

    def resume(*_):
        counter.paused -= 1

    for model in (tr.model, tr.ref_scorer.model):
        model.register_forward_pre_hook(pause)
        model.register_forward_hook(resume)
    with counter:
        m = tr.train_step()
    return counter.count, counter.where, m["micro_batches"], m


def test_a_training_step_reads_the_device_once_whatever_its_micro_batch_count(tiny_model_dir, monkeypatch):
    """Everything computed from a host-to-device copy or a weight counts as on the device.
    A step reads twice: its metrics, all at once, and the clipped gradient norm."""
    one = _sync_count(tiny_model_dir, 100_000, monkeypatch)
    many = _sync_count(tiny_model_dir, 40, monkeypatch)
    assert one[2] == 1 and many[2] == 10
    assert one[:2] == many[:2] == (2, ["tolist", "__float__"])


@pytest.mark.gpu
def test_on_a_gpu_no_micro_batch_makes_the_host_wait(tiny_model_dir):
    """torch's sync debug mode warns at each host sync; the library's own lines must sync
    as often with 10 micro-batches as with 1 (HF models' internals are listed, not judged)."""
    found = {}
    for budget in (100_000, 40):
        tr = _trainer(tiny_model_dir, make_grpo(kl_coef=0.1, entropy_coef=0.01), SAWBatch(_items(WEIGHTS)),
                      skip=True, micro_token_budget=budget, max_grad_norm=1.0, device="cuda")
        tr.train_step()
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                m = tr.train_step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        where = ["/".join(w.filename.split("/")[-3:]) + f":{w.lineno}" for w in caught
                 if "synchroniz" in str(w.message)]
        found[budget] = (m["micro_batches"], sorted(w for w in where if "ludic_core/" in w), where)
    print(found)
    assert found[100_000][0] == 1 and found[40][0] == 10
    assert found[100_000][1] == found[40][1]


def _run_worker(model_dir, out: Path, nproc: int) -> tuple[dict, dict]:
    """{skip: metrics of both steps}, {skip: gradients and final weights} (see _worker_skip.py)."""
    paths = [str(REPO), os.environ.get("PYTHONPATH")]  # the caller's path too (packages installed with --target)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    launch = [] if nproc == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    proc = subprocess.run([sys.executable, *launch, str(SKIP_WORKER), str(model_dir), str(out)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return ({s: json.loads((out / f"{s}.json").read_text()) for s in ("on", "off")},
            {s: load_file(out / f"{s}.safetensors") for s in ("on", "off")})


@pytest.mark.slow
def test_skipping_under_two_fsdp_ranks(tiny_model_dir, tmp_path):
    """2 gloo ranks: the one scored item leaves rank 1 only padding, then nothing is scored
    anywhere. Skipped or not, on 1 rank or 2: the same gradients, counts and weights."""
    m1, t1 = _run_worker(tiny_model_dir, tmp_path / "one", nproc=1)
    m2, t2 = _run_worker(tiny_model_dir, tmp_path / "two", nproc=2)
    for metrics in (m1, m2):
        first, dead = metrics["on"]
        assert (first["skipped_items"], first["skipped_tokens"], first["micro_batches"]) == (3, 19, 1)
        assert (dead["skipped_items"], dead["micro_batches"]) == (4, 0)
        assert metrics["off"][0]["skipped_items"] == metrics["off"][1]["skipped_items"] == 0
        assert first["loss"] == pytest.approx(metrics["off"][0]["loss"], rel=1e-5)
    assert m2["off"][0]["micro_batches"] == 1  # 2 items on each rank, one micro-batch each
    grads = lambda t: {k: v for k, v in t.items() if k.startswith("grad.")}  # noqa: E731
    for got in (t1["off"], t2["on"], t2["off"]):
        _assert_same_grads(grads(t1["on"]), grads(got))
        for k in t1["on"]:
            if k.startswith("weight."):
                # Adam's second step divides by sqrt(v): round-off in the first gradient (1 rank or 2,
                # packed or padded) moved some weights by up to 8.7e-5 in CI. A skipped step that
                # AdamW did not apply (no moment or weight decay) moves them by ~lr = 1e-2.
                assert float((t1["on"][k] - got[k]).abs().max()) < 1e-3, k
