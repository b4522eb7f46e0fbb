"""RolloutEngine: concurrency, GRPO grouping, JSONL, and failure handling."""

import asyncio
import json

import pytest

from ludic_core.agents import Agent
from ludic_core.envs import TicTacToeEnv, scripted_tic_tac_toe_policy
from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig, ScriptedChatClient
from ludic_core.interaction import SingleAgentSyncProtocol
from ludic_core.parsers import xml_tag_parser
from ludic_core.rollout import (
    EnvConfig,
    GRPORequestStrategy,
    ProtocolSpec,
    RolloutEngine,
    RolloutRequest,
    read_rollouts,
)


def _engine(client, **kw) -> RolloutEngine:
    return RolloutEngine(
        env_registry={"tic_tac_toe": TicTacToeEnv, "flaky": FlakyEnv},
        protocol_registry={
            "single_agent": lambda: SingleAgentSyncProtocol(Agent(client, parser=xml_tag_parser("move")))
        },
        **kw,
    )


class FlakyEnv(TicTacToeEnv):
    """Raises on its second step when the seed is odd."""

    def env_reset(self, seed=None):
        self._odd, self._n = bool(seed and seed % 2), 0
        return super().env_reset(seed)

    def env_step(self, action):
        self._n += 1
        if self._odd and self._n == 2:
            raise RuntimeError("simulator crashed")
        return super().env_step(action)


def _requests(n: int, kind: str = "tic_tac_toe", **kw) -> list[RolloutRequest]:
    return [
        RolloutRequest(env=EnvConfig(name=kind, kwargs={"opponent": "random"}),
                       protocol=ProtocolSpec(kind="single_agent"), env_seed=i, **kw)
        for i in range(n)
    ]


def test_16_requests_times_group_of_8_with_the_tiny_model(format_tuned_model_dir, tmp_path):
    client = LocalChatClient(format_tuned_model_dir)
    path = tmp_path / "rollouts.jsonl"
    engine = _engine(client, jsonl_path=path, max_concurrency=128)
    spec = InferenceSpec(sampling=SamplingConfig(temperature=1.0, max_tokens=20))
    rollouts = asyncio.run(engine.generate_rollouts(
        _requests(16, inference=spec), max_steps=5, strategy=GRPORequestStrategy(8, seed=0)
    ))
    assert len(rollouts) == 128 and engine.stats["failed"] == 0
    groups: dict[str, list] = {}
    for r in rollouts:
        groups.setdefault(r.meta["group_id"], []).append(r)
        assert r.length >= 1
        for s in r.steps:  # every step carries its token trace with log-probs
            assert s.trace is not None
            assert len(s.trace.completion_token_ids) == len(s.trace.completion_logprobs) > 0
            assert s.trace.prompt_token_ids and s.trace.policy_version == 0
    assert len(groups) == 16 and all(len(g) == 8 for g in groups.values())
    for g in groups.values():
        assert len({r.meta["env_seed"] for r in g}) == 1
        assert len({r.meta["sampling_seed"] for r in g}) == 8
    assert client.stats["max_batch"] > 32  # concurrent episodes were decoded together
    reloaded = {r.id: r for r in read_rollouts(path)}
    assert reloaded == {r.id: r for r in rollouts}


def test_unknown_env_kind_fails_before_anything_runs(tmp_path):
    engine = _engine(ScriptedChatClient(lambda m: "<move>1</move>"), jsonl_path=tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match=r"request 1: unknown env 'chess'; registered names: .*given in code: "
                                         r"\['flaky', 'tic_tac_toe'\]"):
        asyncio.run(engine.generate_rollouts(_requests(1) + _requests(1, kind="chess"), max_steps=3))
    assert not (tmp_path / "r.jsonl").exists()


def test_env_raising_mid_episode_is_recorded_and_the_batch_kept(tmp_path):
    client = ScriptedChatClient(scripted_tic_tac_toe_policy("minimax", seed=0))
    engine = _engine(client, jsonl_path=tmp_path / "r.jsonl")
    rollouts = asyncio.run(engine.generate_rollouts(_requests(6, kind="flaky"), max_steps=9))
    failed = [r for r in rollouts if r.failed]
    assert [r.meta["env_seed"] for r in failed] == [1, 3, 5]
    for r in failed:
        assert "simulator crashed" in r.meta["error"]
        assert r.length == 1  # the step before the crash is kept
    assert all(not r.failed and r.steps[-1].terminated for r in rollouts if r.meta["env_seed"] % 2 == 0)
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 6 and sum(json.loads(line)["meta"]["failed"] for line in lines) == 3


def test_scripted_teacher_rollouts_have_trainable_traces(tiny_model_and_tokenizer):
    _, tok = tiny_model_and_tokenizer
    client = ScriptedChatClient(scripted_tic_tac_toe_policy("minimax", seed=0), tok)
    rollouts = asyncio.run(_engine(client).generate_rollouts(_requests(4), max_steps=9))
    for r in rollouts:
        for s in r.steps:
            assert tok.decode(s.trace.completion_token_ids, skip_special_tokens=True) == s.action
            assert s.trace.completion_token_ids[-1] == tok.eos_token_id
            assert tok.decode(s.trace.prompt_token_ids).endswith("<|im_start|>assistant\n")


def test_grpo_strategy_validates_group_size():
    with pytest.raises(ValueError, match="group_size"):
        GRPORequestStrategy(0)


def test_grpo_strategy_resumes_its_group_ids_from_its_state():
    """A checkpoint holds the generator's state (JSON), so a resumed run's group ids are those an
    uninterrupted run draws next, not its first batch's again."""
    reqs = _requests(3)
    a = GRPORequestStrategy(2, seed=5)
    first = {r.group_id for r in a.expand(reqs)}
    state = json.loads(json.dumps(a.state_dict()))
    want = [r.group_id for r in a.expand(reqs)]
    resumed, fresh = GRPORequestStrategy(2, seed=5), GRPORequestStrategy(2, seed=5)
    resumed.load_state_dict(state)
    assert [r.group_id for r in resumed.expand(reqs)] == want and not first & set(want)
    assert {r.group_id for r in fresh.expand(reqs)} == first  # what a resume without the state drew
    with pytest.raises(ValueError, match="not a GRPORequestStrategy state"):
        resumed.load_state_dict({"rng": [3, "x", None]})


def test_malformed_jsonl_line_is_named(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": "a", "meta": {}, "steps": []}\n{"id": "b"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        read_rollouts(p)


def test_a_gone_inference_server_fails_the_batch_instead_of_every_episode():
    """Recording N identical 'server unreachable' failures would let training go
    on with an empty or skewed batch; the error must reach the caller."""
    import asyncio

    from ludic_core.agents import Agent
    from ludic_core.envs import TicTacToeEnv
    from ludic_core.inference import InferenceServerError
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.parsers import xml_tag_parser
    from ludic_core.rollout import EnvConfig, ProtocolSpec, RolloutEngine, RolloutRequest

    class GoneClient:
        async def complete(self, request):
            raise InferenceServerError("inference server at http://127.0.0.1:1/v1 is unreachable")

        def sync_weights(self, params, *, version):
            return version

    engine = RolloutEngine(
        env_registry={"ttt": TicTacToeEnv},
        protocol_registry={"single": lambda: SingleAgentSyncProtocol(Agent(GoneClient(), parser=xml_tag_parser("move")))})
    reqs = [RolloutRequest(env=EnvConfig(name="ttt"), protocol=ProtocolSpec(kind="single"), env_seed=i) for i in range(4)]
    with pytest.raises(InferenceServerError, match="unreachable"):
        asyncio.run(engine.generate_rollouts(reqs, max_steps=3))


def test_env_names_not_given_in_code_resolve_through_the_one_registry():
    """A bundled name or an import path needs no env_registry; one that is not an env is
    refused by its kind check before anything is called, naming the request."""
    client = ScriptedChatClient(scripted_tic_tac_toe_policy("minimax", seed=0))
    engine = RolloutEngine(protocol_registry={
        "single_agent": lambda: SingleAgentSyncProtocol(Agent(client, parser=xml_tag_parser("move")))})
    rollouts = asyncio.run(engine.generate_rollouts(
        _requests(2) + _requests(2, kind="ludic_core.envs.tic_tac_toe:TicTacToeEnv"), max_steps=9))
    assert len(rollouts) == 4 and not any(r.failed for r in rollouts)
    assert [r.meta["env_kind"] for r in rollouts][1:3] == ["tic_tac_toe", "ludic_core.envs.tic_tac_toe:TicTacToeEnv"]
    with pytest.raises(ValueError, match=r"request 0: env 'subprocess:getoutput' is a function that is not a LudicEnv"):
        asyncio.run(engine.generate_rollouts(_requests(1, kind="subprocess:getoutput"), max_steps=9))


def test_env_spec_is_env_configs_old_name_for_one_release():
    from ludic_core.rollout import EnvSpec

    with pytest.warns(DeprecationWarning, match=r"EnvSpec\(kind=...\) is renamed EnvConfig\(name=...\)"):
        spec = EnvSpec(kind="tic_tac_toe", kwargs={"opponent": "random"})
    assert spec == EnvConfig(name="tic_tac_toe", kwargs={"opponent": "random"}) and type(spec) is EnvConfig
    request = RolloutRequest(env=spec, protocol=ProtocolSpec(kind="single_agent"))
    assert RolloutRequest.model_validate_json(request.model_dump_json()).env == spec  # JSON, as on any wire
