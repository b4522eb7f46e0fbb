"""`trainer.compile`: each decoder layer compiled (one graph for all of them), the same gradient."""

import pytest
import torch

from ludic_core.algorithms import make_grpo
from ludic_core.config import TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.compiled_layers import compile_layers
from tests.training.test_trainer_packing import _trainer
from tests.training.test_trainer_skip import _assert_same_grads, _step_with_grads


def test_compiled_layers_train_to_the_same_gradient(tiny_model_dir, recording_compile):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    plain, g_plain = _step_with_grads(_trainer(model, tok, make_grpo(), packing=False, micro_token_budget=128))
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    tr = _trainer(model, tok, make_grpo(), packing=False, micro_token_budget=128, compile=True)
    layers = tr.model.model.layers
    assert all(layer._compiled_call_impl is not None for layer in layers)
    compiled, g_compiled = _step_with_grads(tr)
    assert recording_compile  # dynamo traced the layers
    _assert_same_grads(g_compiled, g_plain)
    assert compiled["loss"] == pytest.approx(plain["loss"], rel=1e-5)
    assert set(tr.model.state_dict()) == set(model.state_dict())  # names unchanged: checkpoints, publishing


def test_a_model_without_repeated_layers_is_left_alone(caplog):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    assert compile_layers(model) == 0 and "nothing compiled" in caplog.text


def test_compile_under_torchrun_is_refused(tiny_model_dir):
    from ludic_core.training.distributed import DistContext
    from ludic_core.training.trainer import Trainer

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    ctx = DistContext(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="one process only"):
        Trainer(model, make_grpo(), None, TrainerConfig(compile=True), tokenizer=tok, ctx=ctx)
