"""HumanEval through the generic `evaluate` flow (the code env in the real
bubblewrap sandbox): a scripted reference policy scores pass@1 = pass@2 = 1
on all 164 problems, and a model directory runs end to end (the tiny offline
model writes no code: every sample fails, and is counted)."""

import pytest

from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig

pytestmark = pytest.mark.slow

ENV = EnvConfig(name="code_exec", kwargs={"problems": "humaneval", "reward": "all", "concurrency": 2})
AGENT = AgentConfig(parser=ComponentConfig(name="code_block"), max_turns=1)


def test_humaneval_pass_at_k_through_the_evaluate_flow(prefect_api):
    from flows.evaluate import EvaluateConfig, evaluate
    from ludic_core.compose.policy import ScriptedPolicy

    m = evaluate(EvaluateConfig(policy=ScriptedPolicy(policy="code_reference", kwargs={"problems": "humaneval"}),
                                env=ENV, agent=AGENT, episodes=164, samples=2, seed=0, temperature=None))
    assert m["episodes"] == 328 and m["failed"] == 0 and m["parse_error_rate"] == 0
    assert m["pass@1"] == m["pass@2"] == m["success_rate"] == 1.0


def test_a_model_directory_on_humaneval_runs_end_to_end(prefect_api, tiny_model_dir):
    from flows.evaluate import EvaluateConfig, evaluate
    from ludic_core.compose.policy import ModelPolicy
    from ludic_core.inference.sampling import SamplingConfig

    agent = AGENT.model_copy(update={"sampling": SamplingConfig(max_tokens=32)})
    m = evaluate(EvaluateConfig(policy=ModelPolicy(model_path=str(tiny_model_dir)), env=ENV, agent=agent,
                                episodes=6, samples=2, seed=0, temperature=1.0))
    assert m["episodes"] == 12 and m["failed"] == 0
    assert m["pass@1"] == m["pass@2"] == 0.0 and m["parse_error_rate"] > 0.5  # an untrained model writes no code
