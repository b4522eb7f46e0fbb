"""Kill -9 a training stage that consumes the stream, run it again: the step
counter continues from the checkpoint and every item lands in exactly one
committed checkpoint (an audit of the item ids the checkpoints record)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ludic_core.config import SFTConfig, TrainerConfig
from ludic_core.queue import SAWStream, encode_item
from ludic_core.stages.spec import StageSpec, StreamData

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def put(stream, items, start, fp, round_id):
    stream.put_round(round_id, [encode_item(it, item_id=f"item-{start + i}", env="tic_tac_toe", policy_version=0,
                                            tokenizer=fp) for i, it in enumerate(items)])


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.heavy)])  # 2 ranks: ~30 s, heavy
def test_kill_9_mid_stage_loses_nothing_and_trains_nothing_twice(ranks, redis_server, client, tiny_model_dir,
                                                                 tiny_model_and_tokenizer, sft_items, tmp_path):
    """One process, and two torchrun ranks (rank 0 reads the stream and
    broadcasts each batch; each rank trains its half; the whole job is killed)."""
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
    env = {**os.environ, "LUDIC_REDIS_PASSWORD": PASSWORD, "PYTHONPATH": str(Path(__file__).parents[2]),
           "OMP_NUM_THREADS": "1"}
    result_path = tmp_path / "result.json"
    cmd = ([sys.executable] if ranks == 1 else TORCHRUN) + ["-m", "ludic_core.stages.run", str(spec_path),
                                                            str(result_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    # step 2 committed (items 0-7 acked) and step 3's items read: 4 pending, none left to deliver
    while not ((ckpt / "step_00000002").exists() and stream.pending() == 4 and stream.backlog() == 0):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the stage did not reach step 3"
        time.sleep(0.1)
    kill_tree(proc.pid)  # the torchrun agent and every rank at once (the ranks run in sessions of their own)
    proc.wait()

    put(stream, items[12:], 12, fp, "r1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(result_path.read_text())
    assert (result["resumed_from"], result["step"]) == (2, 6)

    windows = [json.loads((ckpt / f"step_0000000{s}" / "trainer_state.json").read_text())["data"]["source"]["window"]
               for s in (2, 4, 6)]
    trained = [i for w in windows for i in w]
    assert sorted(trained) == sorted(f"item-{i}" for i in range(24))  # each once: none lost, none twice
    assert windows[0] == sorted(f"item-{i}" for i in range(8))
    assert stream.pending() == 0 and stream.backlog() == 0


def test_ranks_end_with_their_torchrun_agent(redis_server, client, tiny_model_dir, tmp_path):
    """kill -9 only the torchrun agent: its ranks (in sessions of their own)
    follow it instead of training on unsupervised."""
    from tests.queue.conftest import PASSWORD

    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(tmp_path / "ckpt"), algorithm=SFTConfig(),
                     trainer=TrainerConfig(lr=1e-3, max_seq_len=512),
                     data=StreamData(url=redis_server.url, key="orphan:saw", items_per_step=4, timeout_s=120),
                     until_step=2)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.model_dump_json())
    env = {**os.environ, "LUDIC_REDIS_PASSWORD": PASSWORD, "PYTHONPATH": str(Path(__file__).parents[2]),
           "OMP_NUM_THREADS": "1"}
    agent = subprocess.Popen(TORCHRUN + ["-m", "ludic_core.stages.run", str(spec_path)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    token = str(spec_path).encode()

    def ranks() -> list[int]:
        found = []
        for cmd in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if token in cmd.read_bytes() and int(cmd.parent.name) != agent.pid:
                    found.append(int(cmd.parent.name))
            except (OSError, ValueError):
                continue
        return found

    deadline = time.monotonic() + 120
    while len(ranks()) < 2 or not client.exists("orphan:saw"):  # both ranks up, rank 0 reading the stream
        assert agent.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    orphans = ranks()
    agent.kill()
    agent.wait()
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{p}").exists() and b"Z" not in Path(f"/proc/{p}/stat").read_bytes().split(b")")[-1][:3]
              for p in orphans):
        assert time.monotonic() < deadline, f"ranks {orphans} outlived their agent"
        time.sleep(0.2)
