"""Code execution: a sandbox for model-written code, a pool of them, and an env on top.

Imports stay light (no torch): a rollout worker builds the env without a model.
"""

from ludic_core.envs.code_exec.env import CodeExecEnv, run_tests, shared_pool
from ludic_core.envs.code_exec.harness import CodeProblem, TestReport, assemble, load_humaneval
from ludic_core.envs.code_exec.pool import SandboxPool
from ludic_core.envs.code_exec.warm import WarmBwrapSandbox
from ludic_core.envs.code_exec.problems import mini_problems
from ludic_core.envs.code_exec.sandbox import (
    BwrapSandbox,
    DockerSandbox,
    ExecResult,
    Judge,
    Limits,
    Sandbox,
    SandboxError,
    SubprocessSandbox,
    make_sandbox,
)

__all__ = ["CodeExecEnv", "run_tests", "shared_pool", "CodeProblem", "TestReport", "assemble", "load_humaneval",
           "SandboxPool", "mini_problems", "BwrapSandbox", "DockerSandbox", "ExecResult", "Judge", "Limits", "Sandbox",
           "SandboxError", "SubprocessSandbox", "WarmBwrapSandbox", "make_sandbox"]
