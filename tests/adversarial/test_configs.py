"""Hostile configs: each must fail validation or preflight, naming what is wrong,
before Prefect starts and before anything a config names is called.

Cases start from the complete example configs (`ludic run FLOW --example`) and
change one value, so each case tests exactly one hostile input. `HOSTILE`
counts the configs this module tries (the number in the issue note).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.cli import load_flow, main
from flows.examples import _examples
from ludic_core.compose.build import agent_factory, check_env
from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.registry import BUNDLED, ComponentError, resolve

ROOT = Path(__file__).resolve().parents[2]


def _example(flow: str) -> dict:
    return _examples()[flow].model_dump(mode="json")


def _with(cfg: dict, path: str, value) -> dict:
    """`cfg` with the dotted `path` set to `value` (a copy)."""
    cfg = copy.deepcopy(cfg)
    *parents, leaf = path.split(".")
    node = cfg
    for key in parents:
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
    node[leaf] = value
    return cfg


# (flow, dotted field, hostile value, text the error must contain)
BOUNDS = [
    # the findings: sizes that pass validation, then exhaust memory after Prefect started
    ("evaluate", "episodes", 1_000_000_000_000, "episodes"),
    ("sft", "steps", 1e12, "steps"),
    ("evaluate", "episodes", 100_000_000, "episodes"),
    ("sft", "steps", 1_000_000_000, "steps"),
    # every other number that sizes memory or time
    ("evaluate", "samples", 1_000_000, "samples"),
    ("evaluate", "episodes", 100_000, "episodes x samples"),  # with samples=1024 below: the product
    ("rejection_sampling", "prompts", 10**9, "prompts"),
    ("rejection_sampling", "samples_per_prompt", 10**6, "samples_per_prompt"),
    ("rl_train", "steps", 10**12, "steps"),
    ("rl_train", "steps_per_stage", 10**12, "steps_per_stage"),
    ("rl_train", "requests_per_step", 10**9, "requests_per_step"),
    ("rl_train", "eval_episodes", 10**12, "eval_episodes"),
    ("rl_train", "eval_seed", 2**70, "eval_seed"),
    ("rl_train", "algorithm.group_size", 10**6, "group_size"),
    ("rl_train", "algorithm.dynamic_sampling", {"min_groups": 10**9}, "min_groups"),
    ("rl_train", "algorithm.dynamic_sampling", {"min_groups": 4, "max_draws": 10**9}, "max_draws"),
    ("rl_train", "trainer.max_seq_len", 2**40, "max_seq_len"),
    ("rl_train", "trainer.micro_token_budget", 10**12, "micro_token_budget"),
    ("rl_train", "trainer.logprob_chunk_tokens", 10**12, "logprob_chunk_tokens"),
    ("rl_train", "trainer.warmup_steps", 10**12, "warmup_steps"),
    ("rl_train", "trainer.keep_last", 10**9, "keep_last"),
    ("rl_train", "trainer.sync_every_steps", 10**12, "sync_every_steps"),
    ("rl_train", "trainer.checkpoint_every", 10**12, "checkpoint_every"),
    ("rl_train", "trainer.max_lag", 10**12, "max_lag"),
    ("rl_train", "trainer.seed", 2**64, "seed"),
    ("rl_train", "trainer.lora", {"r": 10**6}, "r"),
    ("rl_train", "agent.sampling.max_tokens", 10**12, "max_tokens"),
    ("rl_train", "agent.sampling.seed", 2**64, "seed"),
    ("rl_train", "agent.max_turns", 10**9, "max_turns"),
    ("rl_train", "agent.max_parse_failures", 10**9, "max_parse_failures"),
    ("rl_train", "schedule.start", 2**63, "start"),
    ("rl_train", "schedule.stride", 2**40, "stride"),
    ("rl_train", "local.max_batch_size", 10**9, "max_batch_size"),
    ("rl_train", "nproc", 10**6, "nproc"),
    ("rl_train", "nodes.nnodes", 10**6, "nnodes"),
    ("rl_train", "nodes.join_timeout_s", 10**12, "join_timeout_s"),
    ("rl_train", "vllm.stage_attempts", 10**9, "stage_attempts"),
    ("rl_train", "vllm.bucket_mb", 10**9, "bucket_mb"),
    ("rl_train", "vllm.server.max_model_len", 2**40, "max_model_len"),
    ("rl_train", "vllm.server.max_num_batched_tokens", 10**12, "max_num_batched_tokens"),
    ("rl_train", "vllm.server.kv_cache_gib", 10**9, "kv_cache_gib"),
    ("rl_train", "vllm.server.startup_timeout_s", 1e15, "startup_timeout_s"),
    ("sft", "batch_size", 10**9, "batch_size"),
    ("sft", "trainer.total_steps", 10**12, "total_steps"),
    ("pipeline_rl", "actors", 10**6, "actors"),
    ("pipeline_rl", "actor_launch.threads", 10**6, "threads"),
    ("pipeline_rl", "items_per_step", 10**9, "items_per_step"),
    ("pipeline_rl", "requests_per_round", 10**9, "requests_per_round"),
    ("pipeline_rl", "max_backlog", 10**12, "max_backlog"),
    ("pipeline_rl", "trainer.max_lag", 10**12, "max_lag"),
    ("pipeline_rl", "eval_episodes", 10**12, "eval_episodes"),
    ("pipeline_trainer", "steps", 10**12, "steps"),
    ("pipeline_trainer", "items_per_step", 10**9, "items_per_step"),
    ("pipeline_actor", "rounds", 10**12, "rounds"),
    ("pipeline_actor", "max_seq_len", 2**40, "max_seq_len"),
    ("pipeline_actor", "actors", 10**6, "actors"),
    ("demo", "teacher_episodes", 10**12, "teacher_episodes"),
    ("demo", "sft_steps", 10**12, "sft_steps"),
    ("demo", "rl_steps", 10**12, "rl_steps"),
    ("demo", "group_size", 10**6, "group_size"),
    ("demo", "eval_episodes", 10**12, "eval_episodes"),
    ("demo", "seed", 2**64, "seed"),
    ("train_node", "spec.until_step", 10**12, "until_step"),
    ("train_node", "spec.data.batch_size", 10**9, "batch_size"),
    ("train_node", "nproc", 10**6, "nproc"),
    # negative, zero, fractional and non-numbers
    ("sft", "steps", -1, "steps"),
    ("sft", "steps", 0, "steps"),
    ("sft", "steps", 2.5, "steps"),
    ("sft", "steps", "lots", "steps"),
    ("evaluate", "episodes", -5, "episodes"),
    ("evaluate", "samples", 0, "samples"),
    ("evaluate", "seed", -1, "seed"),
    ("rl_train", "trainer.lr", -1e-3, "lr"),
    ("rl_train", "agent.sampling.temperature", -1.0, "temperature"),
    ("rl_train", "agent.sampling.max_tokens", 0, "max_tokens"),
    ("rl_train", "schedule.start", -1, "start"),
    ("rl_train", "vllm.server.port", 70_000, "port"),
    # NaN and infinity, in bounded and unbounded float fields
    ("rl_train", "trainer.lr", float("nan"), "lr"),
    ("rl_train", "trainer.lr", float("inf"), "lr"),
    ("rl_train", "trainer.weight_decay", float("nan"), "weight_decay"),
    ("rl_train", "trainer.max_grad_norm", float("inf"), "max_grad_norm"),
    ("rl_train", "trainer.betas", [float("nan"), 0.95], "betas"),
    ("rl_train", "trainer.betas", [1.5, 0.95], "betas"),
    ("rl_train", "agent.sampling.temperature", float("nan"), "temperature"),
    ("rl_train", "agent.sampling.temperature", float("inf"), "temperature"),
    ("rl_train", "algorithm.clip_high", float("inf"), "clip_high"),
    ("rl_train", "algorithm.kl_coef", float("nan"), "kl_coef"),
    ("evaluate", "success_threshold", float("nan"), "success_threshold"),
    ("evaluate", "temperature", float("inf"), "temperature"),
    ("rejection_sampling", "keep.min_return", float("nan"), "min_return"),
    ("demo", "sft_lr", float("inf"), "sft_lr"),
    # unknown fields, at the top and nested
    ("sft", "stepz", 10, "stepz"),
    ("rl_train", "env.kwarg", {"n": 3}, "kwarg"),
    ("rl_train", "agent.sampling.temprature", 0.5, "temprature"),
    ("rl_train", "trainer.learning_rate", 0.1, "learning_rate"),
    # names: not a name, and a megabyte-long one
    ("evaluate", "env.name", "os; rm -rf /", "neither a registered name nor an import path"),
    ("evaluate", "env.name", "a" * 1_000_000, "longer than"),
    ("evaluate", "agent.parser.name", "pkg.mod:", "neither a registered name nor an import path"),
    ("evaluate", "agent.tools", ["x" * 5000 + ":f"], "longer than"),
]


@pytest.mark.parametrize("flow, field, value, match", BOUNDS, ids=[f"{c[0]}.{c[1]}={str(c[2])[:20]}" for c in BOUNDS])
def test_hostile_values_fail_validation_naming_the_field(flow, field, value, match):
    _, cfg_cls = load_flow(flow)
    cfg = _with(_example(flow), field, value)
    if match == "episodes x samples":
        cfg["samples"] = 1024
    with pytest.raises(ValidationError) as err:
        cfg_cls.model_validate(cfg)
    text = str(err.value)
    assert match in text, text[:2000]
    assert len(text) < 20_000, "the error echoes a huge value back"


def test_the_bounds_are_stated_in_the_field_descriptions():
    from flows.evaluate import EvaluateConfig
    from flows.sft import SupervisedFinetuneConfig

    assert "at most 10,000,000" in EvaluateConfig.model_fields["episodes"].description
    assert "at most 10,000,000" in SupervisedFinetuneConfig.model_fields["steps"].description
    schema = SupervisedFinetuneConfig.model_json_schema()  # the Prefect form enforces it too
    assert schema["properties"]["steps"]["maximum"] == 10_000_000


@pytest.mark.parametrize("flow", sorted(_examples()))
def test_shipped_examples_and_defaults_stay_within_the_bounds(flow):
    _, cfg_cls = load_flow(flow)
    assert cfg_cls.model_validate(_example(flow)) == _examples()[flow]


# ------------------------------------------------------------------ the CLI

def _run_main(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, err


def _billion_laughs() -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "env:\n  name: arithmetic\n  kwargs:\n" + "\n".join("    " + line for line in lines) + "\n"


# (name, file name, content (str or bytes) or a callable making the path, text the error must contain)
CLI_FILES = [
    ("yaml syntax", "bad.yaml", "policy: {kind: model\nenv: [unclosed\n", "bad.yaml"),
    ("yaml tab indent", "tab.yaml", "env:\n\tname: x\n", "tab.yaml"),
    ("json syntax", "bad.json", '{"episodes": 3,,}', "bad.json"),
    ("json trailing garbage", "trail.json", '{"episodes": 3} x', "trail.json"),
    ("list top level", "list.yaml", "- 1\n- 2\n", "must be a mapping"),
    ("scalar top level", "scalar.yaml", "42\n", "must be a mapping"),
    ("string top level", "s.json", '"hello"', "must be a mapping"),
    ("not utf-8", "bin.yaml", b"\xff\xfe\x00garbage\x80", "bin.yaml"),
    ("billion laughs", "lol.yaml", _billion_laughs(), "too large"),
    ("deep nesting yaml", "deep.yaml", "env: " + "[" * 50_000 + "]" * 50_000 + "\n", "deep.yaml"),
    ("deep nesting json", "deep.json", '{"env": ' + "[" * 100_000 + "]" * 100_000 + "}", "deep.json"),
    ("too big", "big.yaml", "# " + "x" * (17 * 2**20) + "\n", "big.yaml"),
    ("python object tag", "obj.yaml", "env: !!python/object/apply:os.system ['touch /tmp/x']\n", "obj.yaml"),
    ("recursive alias", "rec.yaml", "env: &a {name: arithmetic, kwargs: {again: *a}}\n", "too large"),
    ("5000-digit integer", "digits.yaml", "episodes: " + "1" * 5000 + "\n", "digits.yaml"),
    ("yaml float 1.0e+12", "sci.yaml", "policy: {kind: scripted, policy: arithmetic_oracle}\n"
                                      "env: {name: arithmetic}\nepisodes: 1.0e+12\n", "episodes"),
    ("episodes 1e12", "huge.yaml", "policy: {kind: scripted, policy: arithmetic_oracle}\n"
                                   "env: {name: arithmetic}\nepisodes: 1000000000000\n", "episodes"),
    ("nan lr", "nan.json", '{"model_path": "m", "dataset_path": "d", "trainer": {"lr": NaN}}', "lr"),
]


@pytest.mark.parametrize("case, name, content, match", CLI_FILES, ids=[c[0] for c in CLI_FILES])
def test_bad_config_files_are_one_line_errors(tmp_path, capsys, case, name, content, match):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    flow = "sft" if case == "nan lr" else "evaluate"
    rc, err = _run_main(["run", flow, "--config", str(path)], capsys)
    assert rc == 2, err
    assert err.startswith("ludic: error: ") and "Traceback" not in err, err[:2000]
    assert match in err, err[:2000]
    assert len(err) < 5000, f"{len(err)} characters of error"


@pytest.mark.parametrize("case", ["directory", "missing", "unreadable", "device", "fifo"])
def test_config_paths_that_are_not_readable_files_are_one_line_errors(tmp_path, capsys, monkeypatch, case):
    path = tmp_path / "cfg.yaml"
    if case == "directory":
        path.mkdir()
    elif case == "unreadable":
        path.write_text("episodes: 3\n")
        path.chmod(0)
        if os.geteuid() == 0:  # root reads anything: make the read itself fail
            real_open = Path.open

            def deny(self, *a, **k):
                if self == path:
                    raise PermissionError(13, "Permission denied", str(self))
                return real_open(self, *a, **k)

            monkeypatch.setattr(Path, "open", deny)
    elif case == "device":
        path = Path("/dev/zero")  # endless: must not be read into memory
    elif case == "fifo":
        os.mkfifo(path)  # reading would block forever
    rc, err = _run_main(["run", "evaluate", "--config", str(path)], capsys)
    assert rc == 2 and err.startswith("ludic: error: ") and str(path) in err, err
    assert "Traceback" not in err


def test_the_ludic_entry_point_refuses_huge_steps_before_prefect_starts(tmp_path):
    """The finding end to end: `steps: 1e12` through the installed `ludic` script
    exits 2 with one line, fast, and no Prefect database was ever created."""
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_path: m\ndataset_path: d\nsteps: 1.0e+12\n")  # YAML reads a bare 1e12 as a string
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    ludic = Path(sys.executable).parent / "ludic"
    cmd = [str(ludic)] if ludic.exists() else [sys.executable, "-m", "flows.cli"]
    t0 = time.perf_counter()
    res = subprocess.run([*cmd, "run", "sft", "--config", str(cfg)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.startswith("ludic: error: ") and "Traceback" not in res.stderr
    assert "steps: Input should be less than or equal to 10000000" in res.stderr, res.stderr
    assert not list((tmp_path / "prefect-home").rglob("*.db"))
    assert time.perf_counter() - t0 < 30


def test_demo_flags_are_bounded_too(capsys):
    rc, err = _run_main(["demo", "--sft-steps", str(10**12)], capsys)
    assert rc == 2 and err.startswith("ludic: error: ludic demo: invalid DemoConfig: sft_steps:"), err


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo.jsonl")
    return str(tmp_path / "fifo.jsonl")


# env kwargs the preflight builds the env with: (env config maker, text the error must contain)
PREFLIGHT = [
    (lambda t: {"name": "arithmetic", "kwargs": {"n": 10**12}}, "n must be an int in [0, 1,000,000]"),
    (lambda t: {"name": "arithmetic", "kwargs": {"n": "lots"}}, "n must be an int"),
    (lambda t: {"name": "arithmetic", "kwargs": {"problems": 3}}, "takes no parameter 'problems'"),
    (lambda t: {"name": "dataset_qa", "kwargs": {"path": "/dev/zero"}}, "not a regular file"),
    (lambda t: {"name": "dataset_qa", "kwargs": {"path": _fifo(t)}}, "not a regular file"),
    (lambda t: {"name": "tic_tac_toe", "kwargs": {"opponent": {"__class__": "os.system"}}}, "tic_tac_toe"),
]


@pytest.mark.parametrize("env, match", PREFLIGHT, ids=range(len(PREFLIGHT)))
def test_hostile_env_kwargs_fail_the_preflight_as_one_line(tmp_path, capsys, env, match):
    cfg = tmp_path / "eval.json"
    cfg.write_text(json.dumps({"policy": {"kind": "scripted", "policy": "arithmetic_oracle"}, "env": env(tmp_path)}))
    t0 = time.perf_counter()
    rc, err = _run_main(["run", "evaluate", "--config", str(cfg)], capsys)
    assert rc == 2 and err.startswith("ludic: error: ") and match in err, err
    assert time.perf_counter() - t0 < 10


# ------------------------------------------------------ import paths: checked before any call

def test_a_shell_function_named_as_env_is_refused_and_never_called(tmp_path):
    marker = tmp_path / "somefile"
    cfg = EnvConfig(name="subprocess:getoutput", kwargs={"cmd": f"touch {marker}"})
    with pytest.raises(ComponentError, match=r"env 'subprocess:getoutput' is a function that is not a LudicEnv "
                                             r"factory"):
        check_env(cfg)
    assert not marker.exists()


# where a config can name `subprocess:getoutput` (with the command in its kwargs)
SHELL_SLOTS = ["env", "policy", "parser", "context", "tool"]


@pytest.mark.parametrize("slot", SHELL_SLOTS)
def test_the_cli_refuses_a_shell_command_anywhere_before_prefect_starts(tmp_path, capsys, monkeypatch, slot):
    marker = tmp_path / "somefile"
    shell = {"name": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}}
    cfg = {"policy": {"kind": "scripted", "policy": "arithmetic_oracle"}, "env": {"name": "arithmetic"}, "agent": {}}
    if slot == "env":
        cfg["env"] = shell
    elif slot == "policy":
        cfg["policy"] = {"kind": "scripted", "policy": shell["name"], "kwargs": shell["kwargs"]}
    elif slot == "tool":
        cfg["agent"]["tools"] = [shell["name"]]
    else:
        cfg["agent"][slot] = shell
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(cfg))
    monkeypatch.setattr("flows.cli.embedded_api", lambda: pytest.fail("Prefect started before the check"))
    rc, err = _run_main(["run", "evaluate", "--config", str(path)], capsys)
    assert rc == 2 and f"{slot} 'subprocess:getoutput' is a function that is not a" in err, err
    assert not marker.exists()


def _touch(marker: Path) -> dict:
    return {"cmd": f"touch {marker}"}


# (kind, import path, kwargs maker) — every one would run `touch` if it were called
CALLS = [
    ("env", "subprocess:getoutput", _touch),
    ("env", "subprocess:Popen", lambda m: {"args": f"touch {m}", "shell": True}),
    ("env", "os:system", lambda m: {"command": f"touch {m}"}),
    ("env", "builtins:exec", lambda m: {"source": f"open({str(m)!r}, 'w')"}),
    ("env", "pathlib:Path.touch", lambda m: {"self": str(m)}),
    ("env", "ludic_core.envs.dataset_file:load_rows", lambda m: {"path": str(m)}),  # ours, but not an env factory
    ("parser", "subprocess:getoutput", _touch),
    ("context", "subprocess:Popen", lambda m: {"args": f"touch {m}", "shell": True}),
    ("context", "subprocess:getoutput", _touch),
    ("policy", "subprocess:getoutput", _touch),
    ("policy", "subprocess:Popen", lambda m: {"args": f"touch {m}", "shell": True}),
    ("tool", "subprocess:getoutput", None),
    ("tool", "os:system", None),
    ("tool", "shutil:rmtree", None),
]


@pytest.mark.parametrize("kind, ref, kwargs", CALLS, ids=[f"{c[0]}={c[1]}" for c in CALLS])
def test_import_paths_of_the_wrong_kind_are_refused_before_any_call(tmp_path, kind, ref, kwargs):
    from ludic_core.compose.policy import ScriptedPolicy, scripted_client

    marker = tmp_path / "somefile"
    kw = kwargs(marker) if kwargs else {}
    with pytest.raises(ComponentError, match=rf"{kind} '{ref}' is .* not a"):
        if kind == "env":
            check_env(EnvConfig(name=ref, kwargs=kw))
        elif kind in ("parser", "context"):
            agent_factory(AgentConfig(**{kind: ComponentConfig(name=ref, kwargs=kw)}))
        elif kind == "policy":
            scripted_client(ScriptedPolicy(policy=ref, kwargs=kw), None)
        else:
            agent_factory(AgentConfig(tools=(ref,)))
    assert not marker.exists()


USER_ENVS = """
from __future__ import annotations  # string annotations, resolved by the check

from ludic_core.envs import SingleAgentEnv
from ludic_core.types import StepOutcome


class Coin(SingleAgentEnv):
    def env_reset(self, seed=None):
        return "heads or tails?", {}

    def env_step(self, action):
        return StepOutcome(obs=None, reward=float(action == "heads"), terminated=True)


def annotated(start: int = 0) -> Coin:
    return Coin()


def marked(start: int = 0):
    return Coin()


marked.__ludic_env__ = True


def unannotated(start: int = 0):
    return Coin()
"""


@pytest.mark.parametrize("which, ok", [("Coin", True), ("annotated", True), ("marked", True), ("unannotated", False)])
def test_env_factories_declare_what_they_build(tmp_path, monkeypatch, which, ok):
    """A user's module: a LudicEnv class, a factory annotated with it, or one marked
    `__ludic_env__` pass; a factory that says nothing is refused, naming the fix."""
    (tmp_path / "user_envs_for_test.py").write_text(USER_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_envs_for_test", raising=False)
    cfg = EnvConfig(name=f"user_envs_for_test:{which}")
    if ok:
        check_env(cfg)
    else:
        with pytest.raises(ComponentError, match="annotate its return type as a LudicEnv subclass"):
            check_env(cfg)


@pytest.mark.parametrize("kind, name", [(k, n) for k, names in BUNDLED.items() for n in names])
def test_every_bundled_component_passes_its_kind_check_on_its_own(kind, name):
    """Bundled paths are trusted (this project's code), yet each also declares its kind."""
    from ludic_core.registry.kinds import check_kind

    resolve(kind, name)  # trusted: passes
    check_kind(kind, resolve(kind, name), BUNDLED[kind][name])


# Hostile configs this module tries: value cases, config files, config paths, the
# entry-point run, the demo flags, env kwargs, the shell env (library), the shell
# command in each slot (CLI), the wrong-kind import paths, the unannotated factory.
HOSTILE = len(BOUNDS) + len(CLI_FILES) + 5 + 1 + 1 + len(PREFLIGHT) + 1 + len(SHELL_SLOTS) + len(CALLS) + 1
