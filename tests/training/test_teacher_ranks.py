"""A distillation teacher under torchrun: each rank scores its share of the batch, and every rank ends
with the whole batch's scores, exactly those of one process scoring it all (`training/teacher.py`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ludic_core.training.teacher import with_teacher_logprobs

WORKER = Path(__file__).with_name("_worker_teacher.py")
REPO = Path(__file__).resolve().parents[2]


def _two_ranks(out: Path, mode: str) -> list[dict]:
    paths = [str(REPO), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           str(out), mode]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _worker():
    """The worker script as a module: its items and teachers, for the one-process reference."""
    spec = importlib.util.spec_from_file_location("_worker_teacher", WORKER)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    return worker


@pytest.mark.slow
def test_a_teacher_failing_on_one_rank_fails_every_rank_without_a_hang(tmp_path):
    ranks = _two_ranks(tmp_path, "fail")
    assert ranks[1]["error"] == "ValueError: item 1 is longer than the teacher's max_model_len"
    assert ranks[0]["error"].startswith("RuntimeError: the distillation teacher failed on another rank")


@pytest.mark.slow
def test_two_ranks_each_score_their_share_and_all_get_every_score(tmp_path):
    ranks = _two_ranks(tmp_path, "share")

    worker = _worker()
    items = worker.items()
    alone = worker.Recording()
    one, _ = with_teacher_logprobs(alone, items)  # one process: the teacher scores every item
    assert alone.asked == list(range(7))

    assert ranks[0]["asked"] == [0, 2, 4, 6] and ranks[1]["asked"] == [1, 3, 5]  # each its share, once
    for rank, share in zip(ranks, ([0, 2, 4, 6], [1, 3, 5])):
        assert rank["teacher_logprobs"] == [i.teacher_logprobs for i in one]  # bit-identical, floor applied
        assert rank["metrics"]["teacher_tokens"] == sum(len(items[i]) for i in share)
    assert min(min(lp) for lp in ranks[0]["teacher_logprobs"]) == -30.0


@pytest.mark.slow
def test_two_ranks_exchange_the_teachers_top_k_exactly(tmp_path):
    ranks = _two_ranks(tmp_path, "top_k")
    worker = _worker()
    one, _ = with_teacher_logprobs(worker.Recording(), worker.items(), top_k=2)
    for rank in ranks:
        assert rank["teacher_logprobs"] == [i.teacher_logprobs for i in one]
        assert rank["top_ids"] == [i.teacher_top_ids for i in one]
        assert rank["top_logprobs"] == [i.teacher_top_logprobs for i in one]  # bit-identical, floor applied
    assert min(v for item in ranks[1]["top_logprobs"] for row in item for v in row) == -30.0
