"""Configs -> objects: the seam between plain, JSON-able configs and the library's parts.

Every flow (rejection sampling, SFT, RL, evaluation, pipeline actors) describes a run
with the same configs, and this package is where they meet code:

- `configs`:  EnvConfig, AgentConfig, ComponentConfig, SeedSchedule, BranchConfig (torch-free);
- `build`:    envs, agents, engines and requests for any env;
- `policy`:   who plays (scripted, a model directory, a server) -> a `ChatClient`;
- `source`:   the one builder of a fresh-rollout `RolloutBatchSource`.
- `serving`:  which vLLM server a training run starts (LoRA serving for adapters).

Names are resolved by `ludic_core.registry` (a name or `pkg.module:Factory` -> the
object, kind-checked), the one registry the algorithms use too.

Importing the package loads only the configs (no torch), so a Prefect server can
validate a form; the builders are imported from their modules.
"""

from ludic_core.compose.configs import AgentConfig, BranchConfig, ComponentConfig, EnvConfig, SeedSchedule
from ludic_core.registry import ComponentError

__all__ = ["AgentConfig", "BranchConfig", "ComponentConfig", "EnvConfig", "SeedSchedule", "ComponentError"]
