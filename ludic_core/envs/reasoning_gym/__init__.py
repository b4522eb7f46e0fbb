"""reasoning-gym tasks (`pip install 'ludic-prefect[reasoning-gym]'`) as one ludic env family.

Importing this package does not import `reasoning_gym`; building an env (or the teacher) does.
"""

from ludic_core.envs.reasoning_gym.env import MAX_ANSWER_CHARS, REASONING_GYM_SYSPROMPT, ReasoningGymEnv
from ludic_core.envs.reasoning_gym.tasks import EVAL_SCORERS, TaskMix, task_mix, task_names
from ludic_core.envs.reasoning_gym.teacher import reasoning_gym_answer

__all__ = [
    "ReasoningGymEnv",
    "reasoning_gym_answer",
    "REASONING_GYM_SYSPROMPT",
    "MAX_ANSWER_CHARS",
    "EVAL_SCORERS",
    "TaskMix",
    "task_mix",
    "task_names",
]
