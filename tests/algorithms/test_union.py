"""One module per algorithm: its config and its build together; `AlgorithmConfig` (the union
every flow takes) is assembled from the modules, so a new module is a new algorithm."""

from __future__ import annotations

import sys
from typing import Annotated, Union

import pytest
from pydantic import Field, TypeAdapter, ValidationError

import ludic_core.algorithms as algorithms
from ludic_core.algorithms import algorithm_configs, make_grpo, make_reinforce
from ludic_core.config import AlgorithmConfig, group_size_of, reuse_of

BUNDLED = {"cispo", "custom", "grpo", "gspo", "on_policy_distill", "reinforce", "reinforce_baseline", "scalerl", "sft"}
REQUIRED = {"custom": {"credit": "constant", "loss": "reinforce"},  # what a config cannot default
            "on_policy_distill": {"teacher": {"model_path": "runs/models/teacher"}}}

NEW_MODULE = '''
from typing import Literal

from ludic_core import losses
from ludic_core.algorithms.base import GroupAlgorithmBase
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.credit import GroupNormalizedReturn

class MyConfig(GroupAlgorithmBase):
    type: Literal["my_algo"] = "my_algo"
    eps_high: float = 1.0

    def build(self) -> RLAlgorithm:
        return self.assemble(GroupNormalizedReturn(expected_group_size=self.group_size),
                             losses.CISPOLoss(eps_high=self.eps_high))
'''


def test_each_module_holds_one_algorithm_named_after_it():
    configs = algorithm_configs()
    assert {c.model_fields["type"].default for c in configs} == BUNDLED
    assert {c.__module__ for c in configs} == {f"ludic_core.algorithms.{t}" for t in BUNDLED}
    flow_union = TypeAdapter(AlgorithmConfig)
    assert {type(flow_union.validate_python({"type": t, **REQUIRED.get(t, {})})) for t in BUNDLED} == set(configs)


def test_a_new_module_is_a_new_algorithm(tmp_path, monkeypatch):
    """What a newcomer writes: one file in ludic_core/algorithms/ (here a directory added to the
    package's path, so the checkout is not touched)."""
    (tmp_path / "my_algo.py").write_text(NEW_MODULE)
    monkeypatch.setattr(algorithms, "__path__", [*algorithms.__path__, str(tmp_path)])
    try:
        union = Annotated[Union[algorithm_configs()], Field(discriminator="type")]
        cfg = TypeAdapter(union).validate_python({"type": "my_algo", "group_size": 4, "eps_high": 0.5})
        built = cfg.build()
    finally:
        sys.modules.pop("ludic_core.algorithms.my_algo", None)
    assert (built.name, built.loss.eps_high, built.request_strategy(0).group_size) == ("my_algo", 0.5, 4)
    assert group_size_of(cfg) == 4 and reuse_of(cfg).updates == 1


@pytest.mark.parametrize("cls", algorithm_configs(), ids=lambda c: c.model_fields["type"].default)
def test_every_config_builds_its_algorithm(cls):
    fields = ({"credit": "group_norm", "loss": "clipped_surrogate"} if cls is algorithms.CustomConfig
              else REQUIRED.get(cls.model_fields["type"].default, {}))
    grouped = "group_size" in cls.model_fields
    cfg = cls(**fields, **({"group_size": 4} if grouped else {}))
    built = cfg.build()
    assert built.name == cfg.type and built.group_size == group_size_of(cfg) == (4 if grouped else 1)
    assert built.reuse == reuse_of(cfg)


def test_presets_take_exactly_their_config_s_fields():
    """`make_grpo(**fields)` is `GRPOConfig(**fields).build()`: the same names, defaults and checks."""
    assert make_grpo(clip_high=0.28).loss.clip_high == 0.28
    assert make_reinforce(gamma=0.9).credit_assigner.gamma == 0.9
    with pytest.raises(ValidationError, match="bogus"):
        make_grpo(bogus=1)
    with pytest.raises(ValidationError, match="gamma=0.9 discounts per-turn returns"):  # the rule, stated once
        make_grpo(gamma=0.9)
    with pytest.raises(ValueError, match="algorithm 'grpo' compares samples of one prompt: set its group_size"):
        make_grpo().request_strategy(0)  # a group algorithm draws groups only of a stated size
