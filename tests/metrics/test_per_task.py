"""Per-task accuracy and pass@k, against numbers worked out by hand."""

import pytest

from ludic_core.metrics.per_task import episode_task, per_task_metrics
from ludic_core.types import Rollout, Step


def _episode(task, score, group, *, parsed=True, in_reset=True):
    info = {"task": task, "score": score} if parsed else {"parse_error": True}
    meta = {"group_id": group, **({"reset_info": {"task": task}} if in_reset else {})}
    return Rollout(steps=[Step(index=0, prev_obs="q", action="a", next_obs=None, reward=score, info=info)], meta=meta)


def test_accuracy_and_pass_at_k_per_task():
    rollouts = [
        # gcd: prompt g1 right 1 of 2 samples, g2 right 0 of 2
        _episode("gcd", 1.0, "g1"), _episode("gcd", 0.0, "g1"),
        _episode("gcd", 0.0, "g2"), _episode("gcd", 0.0, "g2", parsed=False),
        # lcm: prompt l1 right 2 of 2 (one with a partial score that is not a success)
        _episode("lcm", 1.0, "l1"), _episode("lcm", 1.0, "l1"),
        _episode("lcm", 0.5, "l2"), _episode("lcm", 1.0, "l2"),
    ]
    m = per_task_metrics(rollouts)
    assert m["gcd/episodes"] == 4 and m["gcd/accuracy"] == 0.25 and m["gcd/mean_score"] == 0.25
    # pass@2 per prompt: g1 1 - C(1,2)/C(2,2) = 1, g2 0 -> mean 0.5; pass@1 = mean of c/n = (0.5 + 0) / 2
    assert m["gcd/pass@1"] == 0.25 and m["gcd/pass@2"] == 0.5
    assert m["lcm/accuracy"] == 0.75 and m["lcm/mean_score"] == pytest.approx(3.5 / 4)
    assert m["lcm/pass@1"] == 0.75 and m["lcm/pass@2"] == 1.0  # l1: 1; l2: 1 of 2 right -> 1
    assert m["accuracy"] == 4 / 8 and m["mean_score"] == pytest.approx(4.5 / 8)


def test_an_unparsed_reply_counts_against_its_task():
    # the env never saw the reply, so no step names the task: the reset info does
    lost = _episode("gcd", 0.0, "g", parsed=False)
    assert episode_task(lost) == "gcd"
    m = per_task_metrics([lost, _episode("gcd", 1.0, "h")])
    assert m["gcd/accuracy"] == 0.5 and "unknown/episodes" not in m
    orphan = _episode("gcd", 0.0, "g", parsed=False, in_reset=False)
    assert episode_task(orphan) == "unknown"


def test_one_sample_per_prompt_reports_pass_at_1_only():
    m = per_task_metrics([_episode("gcd", 1.0, "a"), _episode("gcd", 0.0, "b")])
    assert m["gcd/pass@1"] == 0.5 and not any(k.startswith("gcd/pass@") and k != "gcd/pass@1" for k in m)
    assert per_task_metrics([]) == {}
