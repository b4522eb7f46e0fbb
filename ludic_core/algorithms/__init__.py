"""Algorithms: a credit assigner + a loss (+ filters, groups), one module each.

Each module holds one algorithm whole: its config (a torch-free pydantic model
tagged by `type`), its build (credit, loss, filters, groups: `build()` returns
the `RLAlgorithm` the trainer runs) and its preset (`make_grpo(**fields)`, the
config's fields, built). `AlgorithmConfig`, the union every flow takes as
`algorithm: {type: ..., ...}`, is assembled from the modules of this package.

Adding an algorithm is adding one file, `ludic_core/algorithms/<name>.py`:

    class MyConfig(GroupAlgorithmBase):   # AlgorithmBase when it has no groups
        type: Literal["<name>"] = "<name>"
        my_knob: float = 1.0
        def build(self) -> RLAlgorithm:
            return self.assemble(GroupNormalizedReturn(expected_group_size=self.group_size),
                                 losses.MyLoss(self.my_knob))

Reach losses through the package (`from ludic_core import losses`, then
`losses.MyLoss` in `build`): configs load without torch, and the loss loads it
when it is built. A credit and a loss of your own, outside this project, need no
file here: `type: custom` names them by import path (`custom.py`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import TYPE_CHECKING, Annotated, TypeAlias, Union

from pydantic import Field

from ludic_core.algorithms.base import AlgorithmBase, GroupAlgorithmBase, preset
from ludic_core.algorithms.cispo import CISPOConfig, make_cispo
from ludic_core.algorithms.custom import CustomConfig
from ludic_core.algorithms.dynamic_sampling import DynamicSampling
from ludic_core.algorithms.grpo import GRPOConfig, make_grpo
from ludic_core.algorithms.gspo import GSPOConfig, make_gspo
from ludic_core.algorithms.on_policy_distill import DistillTeacher, OnPolicyDistillConfig, make_on_policy_distill
from ludic_core.algorithms.reinforce import ReinforceConfig, make_reinforce
from ludic_core.algorithms.reinforce_baseline import ReinforceBaselineConfig, make_reinforce_baseline
from ludic_core.algorithms.reuse import RolloutReuse
from ludic_core.algorithms.rl_algorithm import RLAlgorithm, RolloutFilter
from ludic_core.algorithms.scalerl import ScaleRLConfig, make_scalerl
from ludic_core.algorithms.sft import SFTConfig, make_sft

__all__ = [
    "AlgorithmBase",
    "AlgorithmConfig",
    "CISPOConfig",
    "CustomConfig",
    "DistillTeacher",
    "DynamicSampling",
    "GRPOConfig",
    "GSPOConfig",
    "GroupAlgorithmBase",
    "OnPolicyDistillConfig",
    "RLAlgorithm",
    "ReinforceBaselineConfig",
    "ReinforceConfig",
    "RolloutFilter",
    "RolloutReuse",
    "SFTConfig",
    "ScaleRLConfig",
    "algorithm_configs",
    "build_algorithm",
    "make_cispo",
    "make_grpo",
    "make_gspo",
    "make_on_policy_distill",
    "make_reinforce",
    "make_reinforce_baseline",
    "make_scalerl",
    "make_sft",
    "preset",
]


def algorithm_configs() -> tuple[type[AlgorithmBase], ...]:
    """Every algorithm's config class, one per module of this package that defines one
    (an `AlgorithmBase` subclass whose `type` has its default), in module-name order."""
    found: list[type[AlgorithmBase]] = []
    for name in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        module = importlib.import_module(f"{__name__}.{name}")
        found += [obj for obj in vars(module).values()
                  if inspect.isclass(obj) and issubclass(obj, AlgorithmBase) and obj.__module__ == module.__name__
                  and not obj.model_fields["type"].is_required()]
    return tuple(found)


if TYPE_CHECKING:  # every member is an AlgorithmBase: what code may ask of any algorithm's config
    AlgorithmConfig: TypeAlias = AlgorithmBase
else:
    AlgorithmConfig = Annotated[Union[algorithm_configs()], Field(discriminator="type")]


def build_algorithm(cfg: AlgorithmBase) -> RLAlgorithm:
    """The torch-side algorithm for a torch-free config."""
    return cfg.build()
