"""Training: the Trainer loop, checkpoints, distributed helpers, schedules.

What a stage wires around the Trainer (its spec, data, inference, torchrun launch)
is one layer up, in `ludic_core.stages`. `Trainer` is resolved lazily
(`ludic_core.lazy`), so `import ludic_core.training` (and a torch-free submodule
such as `checkpoint_integrity`) loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.training.trainer import Trainer

__all__ = ["Trainer"]

__getattr__, __dir__ = lazy_exports(__name__, {"Trainer": "trainer"})
