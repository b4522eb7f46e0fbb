"""What an algorithm's config is: a torch-free model, tagged by `type`, that builds an `RLAlgorithm`.

Configs load anywhere (a Prefect UI form, a YAML file, a test) without torch, so
a config names its loss through the lazy `ludic_core.losses` package and builds
it, loading torch, only in `build`. Flows ask a config what they need before
anything is built (`samples_per_prompt`, `rollout_reuse`), never probe its fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ParamSpec, Sequence

from pydantic import Field

from ludic_core.algorithms.dynamic_sampling import DynamicSampling
from ludic_core.algorithms.reuse import RolloutReuse
from ludic_core.algorithms.rl_algorithm import RLAlgorithm, samples_per_prompt
from ludic_core.bounds import MAX_GROUP, bounded
from ludic_core.credit import CreditAssigner, RolloutFilter
from ludic_core.frozen import FrozenModel

if TYPE_CHECKING:
    from ludic_core.algorithms.on_policy_distill import DistillTeacher
    from ludic_core.losses import Loss

__all__ = ["AlgorithmBase", "GroupAlgorithmBase", "preset"]

P = ParamSpec("P")


class AlgorithmBase(FrozenModel):
    """An algorithm's config: its `type` tag (a `Literal` in each subclass) and its build."""

    type: str

    def build(self) -> RLAlgorithm:
        """The algorithm's credit, loss, filters and groups, built (this loads torch)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it builds (define build())")

    def samples_per_prompt(self) -> int:
        """Episodes drawn per prompt: 1, unless the algorithm compares samples of one prompt."""
        return 1

    def rollout_reuse(self) -> RolloutReuse:
        """Optimiser updates per generated batch: 1 x 1 unless the config says otherwise."""
        return RolloutReuse()

    def teacher_spec(self) -> DistillTeacher | None:
        """The distillation teacher the trainer must score items with: None unless the algorithm has one."""
        return None


class GroupAlgorithmBase(AlgorithmBase):
    """An algorithm whose credit compares the samples of one prompt. Its group size is stated
    here, once: the build checks the credit's groups against it and draws groups of that size."""

    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP,
                                     description="episodes per prompt, compared with each other (checked)")
    dynamic_sampling: DynamicSampling | None = Field(
        None, description="None = off; else draw more request batches until enough groups carry signal (DAPO)")
    reuse: RolloutReuse = Field(RolloutReuse(), description="optimiser updates per generated batch: mini_batches x "
                                                            "epochs (default 1 x 1, each rollout used once)")

    def samples_per_prompt(self) -> int:
        return samples_per_prompt(self.type, self.group_size)

    def rollout_reuse(self) -> RolloutReuse:
        return self.reuse

    def assemble(self, credit: CreditAssigner, loss: Loss, *, filters: Sequence[RolloutFilter] = ()) -> RLAlgorithm:
        """`credit` and `loss` with this config's groups, dynamic sampling (and its filter) and reuse."""
        dynamic = self.dynamic_sampling
        return RLAlgorithm(self.type, credit, loss, rollout_filters=dynamic.filters(filters) if dynamic else [*filters],
                           dynamic_sampling=dynamic, reuse=self.reuse, group_size=self.group_size)


def preset(config: Callable[P, AlgorithmBase]) -> Callable[P, RLAlgorithm]:
    """`make(**fields)` = `config(**fields).build()`: a preset takes exactly the config's
    fields (validated, with their defaults), so none is restated."""

    def make(*args: P.args, **kwargs: P.kwargs) -> RLAlgorithm:
        return config(*args, **kwargs).build()

    make.__doc__ = f"Built from its config's fields (their defaults included): {config.__doc__}"
    return make
