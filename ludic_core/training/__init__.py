"""Training: the Trainer loop, checkpoints, distributed helpers, schedules."""

from typing import Any

__all__ = ["Trainer"]


def __getattr__(name: str) -> Any:  # keep `import ludic_core.training` light
    if name == "Trainer":
        from ludic_core.training.trainer import Trainer

        return Trainer
    raise AttributeError(name)
