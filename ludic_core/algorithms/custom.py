"""Your own algorithm from a config: a credit assigner and a loss named by import path.

    algorithm: {type: custom, credit: "my_pkg.algo:MyCredit", loss: "my_pkg.algo:MyLoss",
                credit_kwargs: {...}, loss_kwargs: {...}, group_size: 8}

Both names go through the registry that resolves envs (`ludic_core.registry`):
a bundled name (`group_norm`, `clipped_surrogate`, ...), an entry point of group
`ludic.credit` / `ludic.losses`, or `package.module:Name`. Each is checked to be
its kind before anything is called (the credit implements `CreditAssigner`, the
loss what `Loss` asks), and every failure names the field. The config checks
only the names' syntax, so it loads where your package is not installed (a
Prefect server); they are imported when the algorithm is built, on the worker.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from ludic_core.algorithms.base import GroupAlgorithmBase
from ludic_core.algorithms.on_policy_distill import DistillTeacher
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.bounds import MAX_GROUP, bounded
from ludic_core.registry import ComponentError, Kind, call_with_kwargs, check_ref, resolve

__all__ = ["CustomConfig"]


class CustomConfig(GroupAlgorithmBase):
    """A credit assigner and a loss of your own (or bundled ones), by name, with their kwargs."""

    type: Literal["custom"] = "custom"
    group_size: int = bounded(1, ge=1, le=MAX_GROUP, description="episodes per prompt, compared by a "
                                                                 "group-relative credit (1 = no groups)")
    credit: Annotated[str, AfterValidator(partial(check_ref, "credit"))] = Field(
        description="the credit assigner: a bundled name (group_norm, episodic, ...) or 'my_pkg.module:MyCredit' "
                    "(a class with compute(rollouts), or a factory annotated to return one)")
    credit_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the credit")
    loss: Annotated[str, AfterValidator(partial(check_ref, "loss"))] = Field(
        description="the loss: a bundled name (clipped_surrogate, reinforce, ...) or 'my_pkg.module:MyLoss' (a "
                    "class with __call__(inputs) and its needs_* flags, or a factory annotated to return one)")
    loss_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the loss")
    teacher: DistillTeacher | None = Field(None, description="the distillation teacher a loss that reads one "
                                                             "(needs_teacher_logprobs) is given; None = none")

    @model_validator(mode="after")
    def _dynamic_sampling_needs_groups(self) -> CustomConfig:
        if self.dynamic_sampling is not None and self.group_size < 2:
            raise ValueError("dynamic_sampling keeps the groups whose episodes differ: it needs group_size >= 2")
        return self

    def teacher_spec(self) -> DistillTeacher | None:
        return self.teacher

    def build(self) -> RLAlgorithm:
        return self.assemble(self._component("credit", self.credit, self.credit_kwargs),
                             self._component("loss", self.loss, self.loss_kwargs))

    @staticmethod
    def _component(field: Kind, ref: str, kwargs: dict[str, Any]) -> Any:
        """`ref` resolved and kind-checked (nothing called), then built from its kwargs; a
        failure of either is a ComponentError naming the field (`algorithm.loss: ...`)."""
        try:
            factory = resolve(field, ref)
            return call_with_kwargs(factory, kwargs, f"{field} {ref!r} (its {field}_kwargs)")
        except ComponentError as exc:
            raise ComponentError(f"algorithm.{field}: {exc}") from exc
        except Exception as exc:  # the user's constructor refused its kwargs' values
            raise ComponentError(f"algorithm.{field}: {field} {ref!r} failed to build from its {field}_kwargs: "
                                 f"{type(exc).__name__}: {exc}") from exc
