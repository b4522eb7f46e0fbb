"""Every code block in README.md and docs/ is run, validated or at least imported.

- python: every block compiles and its imports resolve; the ones a reader runs as
  written are run here (bring your own env, the guessing game and its teacher) or
  under `heavy` (the library's rollouts and two training steps on a tiny model).
- yaml: every block validates against a flow's config (the flow it names, or any
  flow for a fragment), and configs that name components resolve them.
- bash: benchmark scripts exist and take the flags shown; `ludic` commands parse
  with the CLI's own parser; `make` targets exist.
- the claims the docs make in numbers about these snippets are asserted here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.doc_snippets import (
    DOCS,
    ROOT,
    all_blocks,
    check_command,
    commands,
    import_statements,
    python_blocks_in,
    section,
    validate_yaml,
)

BYO = DOCS / "bring-your-own-env.md"


def _ids(blocks):
    return [str(b) for b in blocks]


@pytest.mark.parametrize("block", all_blocks("python"), ids=_ids(all_blocks("python")))
def test_python_blocks_compile_and_their_imports_resolve(block):
    compile(block.code, str(block), "exec")
    exec(compile(import_statements(block.code), str(block), "exec"), {})


@pytest.mark.parametrize("block", all_blocks("yaml"), ids=_ids(all_blocks("yaml")))
def test_yaml_blocks_are_valid_flow_configs(block):
    assert validate_yaml(block.code), f"{block}: no flow's config takes this YAML"


@pytest.mark.parametrize("block", all_blocks("bash"), ids=_ids(all_blocks("bash")))
def test_bash_blocks_name_scripts_flags_and_targets_that_exist(block):
    bad = [(cmd, why) for cmd in commands(block.code) if (why := check_command(cmd))]
    assert not bad, bad


_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s")


def _lists_glued_to_a_paragraph(text: str) -> list[int]:
    """Lines that start a list right under a paragraph line: MkDocs (Python-Markdown)
    renders such a list as text ("- item" inside the paragraph), GitHub as a list."""
    out, fence, prev = [], False, ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and _LIST_ITEM.match(line) and not line[0].isspace() and prev.strip() \
                and not _LIST_ITEM.match(prev) and not prev[0].isspace() and prev.lstrip()[0] not in "|#<>":
            out.append(n)
        prev = line
    return out


def test_every_list_in_the_docs_renders_as_a_list():
    glued = {str(f.relative_to(ROOT)): lines for f in sorted(DOCS.rglob("*.md"))
             if (lines := _lists_glued_to_a_paragraph(f.read_text()))}
    assert not glued, f"a list right under a paragraph line renders as text on the site (add a blank line): {glued}"
    assert _lists_glued_to_a_paragraph("Some text:\n- an item\n") == [2]  # the check itself finds one
    assert _lists_glued_to_a_paragraph("Some text:\n\n- an item\n- another\n") == []


def test_the_pipelines_page_says_to_build_the_model_first():
    """prefect.yaml's deployments start from runs/models/tiny-1m, which a fresh clone lacks."""
    text = section(DOCS / "pipelines.md", "From a fresh clone to runs on a server")
    first = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S))
    assert commands(first) == [".venv/bin/ludic model tiny"]
    from flows.cli import build_parser

    assert build_parser().parse_args(["model", "tiny"]).out == "runs/models/tiny-1m"
    assert "runs/models/tiny-1m" in (ROOT / "prefect.yaml").read_text()
    assert text.index("ludic model tiny") < text.index("prefect server start") < text.index("deploy --all")


def _fresh_package(tmp_path: Path, monkeypatch, files: dict[str, str]) -> None:
    for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
        monkeypatch.delitem(sys.modules, name)
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    for name, code in files.items():
        (tmp_path / "my_pkg" / name).write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_bring_your_own_env_snippet_runs(tmp_path, monkeypatch):
    from ludic_core.compose.configs import AgentConfig, EnvConfig
    from ludic_core.eval import evaluate_policy
    from ludic_core.inference import ScriptedChatClient

    text = section(BYO, "An env in a few lines")
    assert len(text.strip().splitlines()) < 25, "the page promises a short recipe"
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    _fresh_package(tmp_path, monkeypatch, {"envs.py": code})
    env_yaml, agent_yaml = re.findall(r"`((?:env|agent): \{.*?\})`", text.replace("\n", " "))
    env = EnvConfig.model_validate(yaml.safe_load(env_yaml)["env"])
    agent = AgentConfig.model_validate(yaml.safe_load(agent_yaml)["agent"])

    def counter(messages):  # a perfect player of Countdown
        n = int(re.search(r"after (\d+)", messages[-1]["content"]).group(1))
        return f"<n>{n + 1}</n>"

    m = evaluate_policy(ScriptedChatClient(counter), env, agent, seeds=range(10))
    assert m["success_rate"] == 1.0 and m["failed"] == 0
    wrong = evaluate_policy(ScriptedChatClient(lambda msgs: "<n>0</n>"), env, agent, seeds=range(10))
    assert wrong["success_rate"] == 0.0


@pytest.fixture
def guess_game(tmp_path, monkeypatch):
    """docs' guessing game as my_pkg/guess.py, and its evaluate config, validated."""
    from flows.evaluate import EvaluateConfig

    text = section(BYO, "A multi-turn env, its own table, and a scripted teacher")
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    (config,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    _fresh_package(tmp_path, monkeypatch, {"guess.py": code})
    cfg = EvaluateConfig.model_validate(yaml.safe_load(config))
    cfg.preflight()  # the env and the teacher resolve, and pass the kind checks
    return cfg


def _with(agent, **changes):
    """`agent` with `changes`, validated (a model_copy would leave plain dicts in it)."""
    return type(agent).model_validate({**agent.model_dump(), **changes})


def test_the_scripted_teacher_solves_the_guessing_game_as_the_page_says(guess_game):
    from ludic_core.compose.policy import open_client
    from ludic_core.eval import evaluate_policy

    client, _ = open_client(guess_game.policy, None)  # the config's path: factory(**kwargs) -> policy
    seeds = range(guess_game.seed, guess_game.seed + guess_game.episodes)  # as the evaluate flow plays them
    m = evaluate_policy(client, guess_game.env, guess_game.agent, seeds=seeds)
    assert m["success_rate"] == 1.0 and m["failed"] == 0 and m["parse_error_rate"] == 0.0
    assert m["guesses_when_solved"] == pytest.approx(3.7)  # the env's own column, "3.7 guesses"
    assert m["mean_turns"] == pytest.approx(3.7)


def test_the_teacher_sees_only_what_the_context_shows(guess_game):
    """With the last observation only, binary search has nothing to go on: it repeats its opening."""
    from ludic_core.compose.policy import open_client
    from ludic_core.eval import evaluate_policy

    client, _ = open_client(guess_game.policy, None)
    seen = []
    policy = client.policy
    client.policy = lambda messages: seen.append(list(messages)) or policy(messages)
    window = _with(guess_game.agent, context={"name": "sliding_window", "kwargs": {"keep_last": 1}})
    m = evaluate_policy(client, guess_game.env, window, seeds=range(20))
    assert all(not any(msg["role"] == "assistant" for msg in msgs) for msgs in seen)
    assert m["success_rate"] < 1.0


def test_the_parse_penalty_numbers_on_the_page(guess_game):
    from ludic_core.eval import evaluate_policy
    from ludic_core.inference import ScriptedChatClient

    text = section(BYO, "The parse penalty and a 0/1 env's mean return")
    (fragment,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    penalised = _with(guess_game.agent, **yaml.safe_load(fragment)["agent"])
    assert penalised.max_turns == 1 and penalised.parser.kwargs["failure_penalty"] == -1
    default = _with(penalised, parser={"name": "xml_tag", "kwargs": {"tag": "n"}})
    no_tag = ScriptedChatClient(lambda messages: "7")
    seeds = range(20)
    m0 = evaluate_policy(no_tag, guess_game.env, default, seeds=seeds)
    m1 = evaluate_policy(no_tag, guess_game.env, penalised, seeds=seeds)
    assert (m0["mean_return"], m1["mean_return"]) == (0.0, -1.0)  # "-1.0 (0.0 with the default)"
    assert m0["parse_error_rate"] == m1["parse_error_rate"] == 1.0

    # "a right answer after one malformed try returns 0 and does not count as a success"
    def sloppy(messages):
        if not any(m["role"] == "assistant" for m in messages):
            return "7"
        secret = 1 + 100_000 % 20  # evaluate's first seed; the env picks 1 + seed % top
        return f"<n>{secret}</n>"

    multi = _with(penalised, max_turns=2)  # the guessing game's agent: full_dialog
    m = evaluate_policy(ScriptedChatClient(sloppy), guess_game.env, multi, seeds=[100_000])
    assert m["mean_return"] == 0.0 and m["success_rate"] == 0.0
    unpenalised = _with(multi, parser={"name": "xml_tag", "kwargs": {"tag": "n"}})
    m = evaluate_policy(ScriptedChatClient(sloppy), guess_game.env, unpenalised, seeds=[100_000])
    assert m["mean_return"] == 1.0 and m["success_rate"] == 1.0


def test_the_humaneval_config_is_a_valid_evaluate_config():
    text = (DOCS / "code-sandbox.md").read_text()
    (config,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    ((flow, cfg),) = validate_yaml(config)
    cfg.preflight()  # the env and the policy names resolve
    assert flow == "evaluate" and cfg.env.name == "code_exec" and cfg.samples == 2
    assert cfg.policy.policy == "code_reference"


@pytest.mark.heavy
def test_the_library_and_training_snippets_run_as_written(tmp_path):
    """docs/library.md's rollouts, then docs/training.md's two GRPO steps on them,
    in a fresh process and directory (they write runs/ relative to it)."""
    library = python_blocks_in(DOCS / "library.md", "Rollouts in a few lines")[0]
    training = python_blocks_in(DOCS / "training.md", "Training and GPUs")[0]
    check = ("import os\n"
             "assert len(rollouts) == 32 and all(r.steps for r in rollouts)\n"
             "assert os.path.isdir('runs/ckpt/step_00000002') and os.path.isdir('runs/models/tiny-1m')\n"
             "print('snippets ok')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", library + training + check], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0 and "snippets ok" in out.stdout, out.stderr[-3000:]


def test_a_missing_model_says_how_to_build_it(tmp_path, monkeypatch):
    """docs/pipelines.md quotes the error a run without the tiny model fails with."""
    from flows.common import require_model_dir

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        require_model_dir("model_path", "runs/models/tiny-1m")
    message = str(err.value)
    assert message.startswith("model_path: no model directory at 'runs/models/tiny-1m'")
    assert "build it with `ludic model tiny" in message
    text = section(DOCS / "pipelines.md", "From a fresh clone to runs on a server")
    assert "model_path: no\nmodel directory at 'runs/models/tiny-1m'" in text and "ludic model tiny" in text


def test_partial_nested_configs_change_only_what_they_name_as_the_page_says():
    """docs/pipelines.md: `trainer: {lr: 0.001}` keeps sft's cosine schedule, warmup and
    max_seq_len; `trainer.total_steps` follows `steps`, and a disagreeing one is refused."""
    from flows.sft import SupervisedFinetuneConfig

    base = {"model_path": "m", "dataset_path": "d"}
    flow_default = SupervisedFinetuneConfig.model_validate(base).trainer
    cfg = SupervisedFinetuneConfig.model_validate({**base, "trainer": {"lr": 0.001}})
    assert cfg.trainer.lr == 0.001
    assert (cfg.trainer.schedule, cfg.trainer.warmup_steps, cfg.trainer.max_seq_len) == (
        flow_default.schedule, flow_default.warmup_steps, flow_default.max_seq_len) == ("cosine", 10, 512)
    assert SupervisedFinetuneConfig.model_validate({**base, "steps": 200}).trainer.total_steps == 200
    with pytest.raises(ValueError, match="total_steps"):
        SupervisedFinetuneConfig.model_validate({**base, "steps": 200, "trainer": {"total_steps": 400}})
    text = section(DOCS / "pipelines.md", "Your own values, and why a run failed")
    assert "`trainer: {lr: 0.001}`" in text and "`trainer.total_steps` is `steps`" in text


TOOLS = DOCS / "agents-with-tools.md"


def test_the_tool_agent_snippet_prints_what_the_page_says(capsys):
    blocks = re.findall(r"```python\n(.*?)```", section(TOOLS, "Give it to an agent"), re.S)
    (code,) = [b for b in blocks if "asyncio.run" in b]
    exec(compile(code, str(TOOLS), "exec"), {"__name__": "docs_snippet"})
    expected = re.search(r"^# (1776 .*)$", code, re.M).group(1)
    assert capsys.readouterr().out.strip() == expected


def test_the_pages_tool_turns_a_bad_call_into_an_observation(tmp_path, monkeypatch):
    import asyncio

    from ludic_core.agents.tools import ToolCall, function_schema, run_tool

    (code,) = re.findall(r"```python\n(.*?)```", section(TOOLS, "A tool is a typed, documented function"), re.S)
    _fresh_package(tmp_path, monkeypatch, {"tools.py": code})
    from my_pkg.tools import word_count

    schema = function_schema(word_count)["function"]
    assert schema["parameters"]["properties"]["text"] == {"type": "string",
                                                          "description": "the text, at most 2000 characters"}
    tools = {"word_count": word_count}
    assert asyncio.run(run_tool(tools, ToolCall("c", "word_count", {"text": "a b c"}))) == (True, "3")
    ok, content = asyncio.run(run_tool(tools, ToolCall("c", "word_count", {"text": "x " * 1500})))
    assert not ok and "at most 2000 are allowed" in content
    ok, content = asyncio.run(run_tool(tools, ToolCall("c", "word_count", {"text": 5})))
    assert not ok and "must be string" in content
