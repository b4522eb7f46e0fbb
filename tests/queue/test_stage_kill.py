"""Kill -9 a training stage that consumes the stream, run it again: the step
counter continues from the checkpoint and every item lands in exactly one
committed checkpoint (an audit of the item ids the checkpoints record)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ludic_core.config import SFTConfig, TrainerConfig
from ludic_core.queue import SAWStream, encode_item
from ludic_core.training.stage_spec import StageSpec, StreamData

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def put(stream, items, start, fp, round_id):
    stream.put_round(round_id, [encode_item(it, item_id=f"item-{start + i}", env="tic_tac_toe", policy_version=0,
                                            tokenizer=fp) for i, it in enumerate(items)])


def test_kill_9_mid_stage_loses_nothing_and_trains_nothing_twice(redis_server, client, tiny_model_dir,
                                                                 tiny_model_and_tokenizer, sft_items, tmp_path):
    from tests.queue.conftest import PASSWORD
    from ludic_core.models import tokenizer_fingerprint

    fp = tokenizer_fingerprint(tiny_model_and_tokenizer[1])
    stream = SAWStream(client, key="kill:saw")
    stream.ensure_group()
    items = sft_items[:24]
    assert len(items) == 24
    put(stream, items[:12], 0, fp, "r0")  # 3 steps' worth: the stage will block on step 4

    ckpt = tmp_path / "ckpt"
    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(ckpt), algorithm=SFTConfig(),
                     trainer=TrainerConfig(lr=1e-3, checkpoint_every=2, keep_last=10, max_seq_len=512),
                     data=StreamData(url=redis_server.url, key="kill:saw", items_per_step=4, timeout_s=120),
                     until_step=6)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.model_dump_json())
    env = {**os.environ, "LUDIC_REDIS_PASSWORD": PASSWORD, "PYTHONPATH": str(Path(__file__).parents[2])}
    cmd = [sys.executable, "-m", "ludic_core.training.stage", str(spec_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    # step 2 committed (items 0-7 acked) and step 3's items read: 4 pending, none left to deliver
    while not ((ckpt / "step_00000002").exists() and stream.pending() == 4 and stream.backlog() == 0):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the stage did not reach step 3"
        time.sleep(0.1)
    proc.kill()
    proc.wait()

    put(stream, items[12:], 12, fp, "r1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["resumed_from"], result["step"]) == (2, 6)

    windows = [json.loads((ckpt / f"step_0000000{s}" / "trainer_state.json").read_text())["data"]["source"]["window"]
               for s in (2, 4, 6)]
    trained = [i for w in windows for i in w]
    assert sorted(trained) == sorted(f"item-{i}" for i in range(24))  # each once: none lost, none twice
    assert windows[0] == sorted(f"item-{i}" for i in range(8))
    assert stream.pending() == 0 and stream.backlog() == 0
