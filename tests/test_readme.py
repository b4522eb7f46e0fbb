"""The README's "Bring your own env" runs as written: its env file and its configs."""

import re
from pathlib import Path

import yaml

from ludic_core.eval import evaluate_policy
from ludic_core.inference import ScriptedChatClient
from ludic_core.recipes.configs import AgentConfig, EnvConfig

README = Path(__file__).resolve().parents[1] / "README.md"


def _section() -> str:
    text = README.read_text()
    start = text.index("### Bring your own env")
    return text[start:text.index("\n## ", start)]


def test_bring_your_own_env_snippet_runs(tmp_path, monkeypatch):
    section = _section()
    assert len(section.strip().splitlines()) < 25, "the README promises a short recipe"
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "envs.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    env_yaml, agent_yaml = re.findall(r"`((?:env|agent): \{.*?\})`", section.replace("\n", " "))
    env = EnvConfig.model_validate(yaml.safe_load(env_yaml)["env"])
    agent = AgentConfig.model_validate(yaml.safe_load(agent_yaml)["agent"])

    def counter(messages):  # a perfect player of Countdown
        n = int(re.search(r"after (\d+)", messages[-1]["content"]).group(1))
        return f"<n>{n + 1}</n>"

    m = evaluate_policy(ScriptedChatClient(counter), env, agent, seeds=range(10))
    assert m["success_rate"] == 1.0 and m["failed"] == 0
    wrong = evaluate_policy(ScriptedChatClient(lambda msgs: "<n>0</n>"), env, agent, seeds=range(10))
    assert wrong["success_rate"] == 0.0


def test_humaneval_config_in_the_readme_is_a_valid_evaluate_config():
    from flows.evaluate import EvaluateConfig

    text = README.read_text()
    start = text.index("## Code: a sandbox, a code env, HumanEval")
    block = re.search(r"```yaml\n(.*?)```", text[start:], re.S).group(1)
    cfg = EvaluateConfig.model_validate(yaml.safe_load(block))
    cfg.preflight()  # the env and the policy names resolve
    assert cfg.env.name == "code_exec" and cfg.samples == 2 and cfg.policy.policy == "code_reference"
