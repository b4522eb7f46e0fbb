"""A torchrun stage across machines: two agents on loopback play two nodes.

Each "node" runs the same command (c10d rendezvous), with one rank each; the
job they form must train exactly what one node with two ranks trains.
"""

import threading

import pytest
import torch
from pydantic import ValidationError

from ludic_core.config import SFTConfig, TrainerConfig
from ludic_core.ports import free_port
from ludic_core.stages.launch import run_torchrun, torchrun_command
from ludic_core.stages.spec import DatasetData, NodeSettings, StageSpec


def _spec(model, data, ckpt, nodes=NodeSettings(), device="auto"):
    return StageSpec(model_path=str(model), checkpoint_dir=str(ckpt), algorithm=SFTConfig(),
                     trainer=TrainerConfig(lr=1e-3, micro_token_budget=4096, max_seq_len=256, device=device),
                     data=DatasetData(path=str(data), batch_size=8), until_step=2, nodes=nodes)


def test_one_node_is_standalone_and_several_meet_at_the_endpoint():
    one = _spec("m", "d", "c")
    assert "--standalone" in torchrun_command(one, 2, "s.json", "r.json")
    many = _spec("m", "d", "c", NodeSettings(nnodes=3, rdzv_endpoint="head:29400", rdzv_id="job7", join_timeout_s=60))
    cmd = torchrun_command(many, 4, "s.json", "r.json")
    assert "--standalone" not in cmd
    for arg in ("--nnodes=3", "--rdzv-backend=c10d", "--rdzv-endpoint=head:29400", "--rdzv-id=job7-2",
                "--rdzv-conf=join_timeout=60", "--nproc-per-node=4"):
        assert arg in cmd


@pytest.mark.parametrize("bad, names", [
    ({"nnodes": 2}, "rdzv_endpoint"),
    ({"nnodes": 2, "rdzv_endpoint": "head"}, "HOST:PORT"),
    ({"nnodes": 3, "rdzv_endpoint": "head:1", "node_deployments": ["train_node/a"]}, "one per other node"),
])
def test_bad_node_settings_are_named(bad, names):
    with pytest.raises(ValidationError, match=names):
        NodeSettings(**bad)


def _weights(model_dir):
    from ludic_core.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(str(model_dir))
    return model.state_dict()


@pytest.mark.heavy  # ~35 s of two torchrun agents; make test-heavy (and .ci/run) runs it
def test_two_loopback_nodes_train_what_one_node_with_two_ranks_trains(tiny_model_dir, teacher_dataset, tmp_path):
    nodes = NodeSettings(nnodes=2, rdzv_endpoint=f"127.0.0.1:{free_port()}", rdzv_id="loopback",
                         join_timeout_s=120)
    # CPU ranks over gloo: two loopback "nodes" on one machine would both bind cuda:0 (NCCL refuses
    # two ranks on one GPU); real nodes each have their own GPUs.
    spec = _spec(tiny_model_dir, teacher_dataset, tmp_path / "two-nodes", nodes, device="cpu")
    results, errors = [None, None], []

    def node(i):
        try:
            results[i] = run_torchrun(spec, 1, on_line=lambda line: None)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert all(r is not None for r in results), "a node's agent did not finish"
    for r in results:  # each node reports the job it was part of
        assert (r["step"], r["world_size"], r["checkpoint"]) == (2, 2, results[0]["checkpoint"])

    single = run_torchrun(_spec(tiny_model_dir, teacher_dataset, tmp_path / "one-node", device="cpu"), 2,
                          on_line=lambda line: None)
    assert single["world_size"] == 2
    a, b = _weights(results[0]["model_path"]), _weights(single["model_path"])
    start = _weights(tiny_model_dir)
    assert any(not torch.equal(a[k], start[k]) for k in a), "the two-node job trained nothing"
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)
