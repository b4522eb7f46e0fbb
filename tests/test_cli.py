"""Smoke tests of the real `ludic` entry point with tiny budgets."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.cli import FLOWS

ROOT = Path(__file__).resolve().parents[1]


def _ludic(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _ludic_here(*args: str, capsys) -> tuple[int, str, str]:
    """The `ludic` entry point in-process (what `python -m flows.cli` calls), without the
    5 s of imports a fresh interpreter pays: for the commands that start nothing."""
    from flows.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_model_tiny_builds_a_loadable_directory(tmp_path):
    """The one subprocess run of a `ludic model` command: the real entry point."""
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "model.safetensors").exists()


def test_model_tiny_unknown_preset_is_a_clear_error(tmp_path, capsys):
    code, _, err = _ludic_here("model", "tiny", "--out", str(tmp_path / "m"), "--preset", "huge", capsys=capsys)
    assert code == 2 and "unknown tiny model preset 'huge'" in err
    assert not (tmp_path / "m").exists()


def test_run_rejects_a_config_with_a_typo_naming_the_field(tmp_path):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("policy: {kind: model, model_path: x}\nenv: {name: tic_tac_toe}\nepisodes: 3\n"
                   "temprature: 0.5\n")
    res = _ludic("run", "evaluate", "--config", str(cfg), home=tmp_path)
    assert res.returncode == 2 and "temprature" in res.stderr, res.stderr


def test_run_with_a_missing_model_fails_fast_naming_the_field(tmp_path):
    """preflight() runs before Prefect: the error names the field and the path, the
    exit code is 2, and no Prefect API (no SQLite database) was ever started."""
    missing = tmp_path / "no-such-model"
    dataset = tmp_path / "data.jsonl"
    dataset.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(yaml.safe_dump({"model_path": str(missing), "dataset_path": str(dataset),
                                   "out_dir": str(tmp_path / "out")}))
    res = _ludic("run", "sft", "--config", str(cfg), home=tmp_path, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "model_path" in res.stderr and str(missing) in res.stderr, res.stderr
    assert f"ludic model tiny --out {missing}" in res.stderr, res.stderr  # and how to make one
    assert "Traceback" not in res.stderr, res.stderr
    assert not list((tmp_path / "prefect-home").rglob("*.db")), "a Prefect database was created"
    assert not (tmp_path / "out").exists()  # (a wall-clock bound here failed on loaded CI hosts)


def test_the_hinted_command_builds_the_missing_model(tmp_path):
    """The error for a missing `runs/models/tiny-1m` (a fresh clone's, which prefect.yaml
    and `--example` name) gives a command; running it makes the config pass preflight."""
    import re
    import shlex

    from flows.sft import SupervisedFinetuneConfig

    model = tmp_path / "runs" / "models" / "tiny-1m"
    cfg = SupervisedFinetuneConfig(model_path=str(model), dataset_path=str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        cfg.preflight()
    command = re.search(r"`(ludic model tiny [^`]*)`", str(info.value))
    assert command, info.value
    from flows.cli import main

    assert main(shlex.split(command[1])[1:]) == 0  # the `ludic` entry point, in-process
    cfg.preflight()


def test_run_refuses_a_total_steps_that_disagrees_with_steps(tmp_path):
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_path: m\ndataset_path: d\nsteps: 200\ntrainer: {lr: 0.001, total_steps: 400}\n")
    res = _ludic("run", "sft", "--config", str(cfg), home=tmp_path, timeout=120)
    assert res.returncode == 2 and "trainer.total_steps=400 disagrees with steps=200" in res.stderr, res.stderr


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_run_example_parses_back_into_the_flow_config(flow, capsys):
    from flows.cli import load_flow
    from flows.examples import _examples

    code, out, err = _ludic_here("run", flow, "--example", capsys=capsys)
    assert code == 0, err
    assert out.startswith(f"# ludic run {flow} --config")
    _, cfg_cls = load_flow(flow)
    cfg = cfg_cls.model_validate(yaml.safe_load(out))
    assert cfg == _examples()[flow]
    # every field of the config model is written out, with its description as a comment,
    # marked `required:` where the field has no default (its value is an example)
    for name, field in cfg_cls.model_fields.items():
        assert f"\n{name}:" in out, name
        note = "required: " if field.is_required() else ""
        if field.description or note:
            assert f"# {note}{field.description or ''}".rstrip() + f"\n{name}:" in out, name


def test_run_example_through_the_real_entry_point(tmp_path):
    res = _ludic("run", "sft", "--example", home=tmp_path, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("# ludic run sft --config"), res.stderr


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_example_shows_the_true_defaults(flow):
    """Only required fields get example values; every other value shown is what the
    flow's config takes when the field is left out."""
    from flows.cli import load_flow
    from flows.examples import _examples, required_values

    cfg_cls = load_flow(flow)[1]
    assert set(required_values(flow)) == {n for n, f in cfg_cls.model_fields.items() if f.is_required()}
    example = _examples()[flow]
    left_out = cfg_cls.model_validate({n: getattr(example, n) for n, f in cfg_cls.model_fields.items()
                                       if f.is_required()})
    assert example == left_out


@pytest.mark.parametrize("flow", ["sft", "rl_train", "pipeline_rl", "pipeline_trainer"])
def test_an_example_with_other_steps_trains_for_those_steps(flow):
    """The docs' path: print the example, edit `steps`, run it. The derived
    `trainer.total_steps` is written null ("follows steps"), so it follows the edit."""
    from flows.cli import load_flow
    from flows.examples import example_config

    data = yaml.safe_load(example_config(flow))
    assert data["trainer"]["total_steps"] is None
    cfg = load_flow(flow)[1].model_validate({**data, "steps": 123})
    assert cfg.trainer.total_steps == 123


def test_example_values_the_newcomer_saw_are_the_real_defaults():
    """The values issue 38 found wrong in `--example` (shown 30 / 0 / 2048 / xml_tag, 1, 40)."""
    from flows.examples import _examples

    ex = _examples()
    assert (ex["rl_train"].steps, ex["rl_train"].eval_seed, ex["rl_train"].trainer.total_steps) == (20, 100_000, 20)
    assert ex["rejection_sampling"].prompts == 4096
    agent = ex["rl_train"].agent
    assert (agent.parser.name, agent.max_turns, agent.sampling.max_tokens) == ("identity", 16, 64)


def test_demo_recipe_choices(tmp_path):
    from flows.cli import build_parser
    from ludic_core.recipes.recipe import RECIPES

    demo = next(a for a in build_parser()._subparsers._group_actions[0].choices["demo"]._actions
                if a.dest == "recipe")
    assert tuple(demo.choices) == RECIPES
    res = _ludic("demo", "--recipe", "chess", home=tmp_path, timeout=120)
    assert res.returncode == 2 and "invalid choice: 'chess'" in res.stderr, res.stderr
    for name in RECIPES:
        assert name in res.stderr, res.stderr
    assert not (tmp_path / "prefect-home").exists() or not list((tmp_path / "prefect-home").rglob("*.db"))


def test_demo_teacher_kwargs_are_checked_before_anything_starts(tmp_path, capsys):
    for bad, why in (("[1]", "a JSON object is needed, got list"), ("{x", "not JSON")):
        with pytest.raises(SystemExit):
            _ludic_here("demo", "--teacher-kwargs", bad, capsys=capsys)
        assert f"argument --teacher-kwargs: {why}" in capsys.readouterr().err
    code, _, err = _ludic_here("demo", "--out", str(tmp_path / "run"), "--teacher-kwargs", '{"fallbak": "centre"}',
                               capsys=capsys)
    assert code == 2 and "takes no parameter 'fallbak'" in err, err
    code, _, err = _ludic_here("demo", "--out", str(tmp_path / "run"), "--teacher-kwargs", '{"confidence": "sure"}',
                               capsys=capsys)
    assert code == 2 and "confidence must be a number, got 'sure'" in err, err  # the factory's own check
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_demo_chain_runs_end_to_end_through_prefect(tmp_path):
    res = _ludic("demo", "--out", str(tmp_path / "run"), "--sft-steps", "3", "--rl-steps", "1",
                 "--teacher-episodes", "32", "--eval-episodes", "4", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for stage in ("teacher", "before SFT", "after SFT", "after RL"):
        assert stage in res.stdout
    for column in ("X legal", "X win+draw", "O legal", "O win+draw"):  # the tic-tac-toe recipe's table
        assert column in res.stdout, res.stdout[-3000:]
    assert (tmp_path / "run" / "rejection" / "dataset").is_dir()
    assert (tmp_path / "run" / "sft" / "checkpoints" / "step_00000003" / "model" / "model.safetensors").exists()
    assert (tmp_path / "run" / "rl" / "checkpoints" / "step_00000001").is_dir()


def _children(pid: int) -> set[int]:
    """PIDs whose parent is `pid` (from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def test_a_stop_signal_that_code_wrapped_still_ends_as_interrupted(monkeypatch, capsys):
    """A signal can land inside code that wraps what it raises (a lazy import's class body turns
    KeyboardInterrupt into "RuntimeError: Error calling __set_name__"): it is still the stop, exit
    130, not a crash. The same error with no signal stays a crash."""
    import signal
    import time

    import flows.cli as cli
    from tasks.retries import clear_stop

    def stopped_in_a_wrapper(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc
        return 0

    def crashes(args):
        raise RuntimeError("a real bug")

    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        monkeypatch.setattr(cli, "_cmd_model", stopped_in_a_wrapper)
        code, _, err = _ludic_here("model", "tiny", "--out", "unused", capsys=capsys)
        assert code == 130 and "ludic: interrupted" in err
        monkeypatch.setattr(cli, "_cmd_model", crashes)
        with pytest.raises(RuntimeError, match="a real bug"):
            _ludic_here("model", "tiny", "--out", "unused", capsys=capsys)
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
        clear_stop()  # the stop is this process's: the tests that follow in it retry as usual


@pytest.mark.slow
def test_kill_stops_the_demo_and_the_temporary_prefect_server_it_started(tmp_path, prefect_db):
    """`kill PID` (SIGTERM, what a supervisor sends) unwinds like Ctrl-C: the temporary Prefect API
    server, a child process, stops with the command instead of running on."""
    import signal
    import time

    from tests.prefect_db import seed_home

    seed_home(tmp_path / "prefect-home", prefect_db)  # the demo chain's test migrates an empty one
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "demo", "--out", str(tmp_path / "run"),
                             "--teacher-episodes", "4096"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while "Beginning flow run" not in (line := proc.stdout.readline()):  # the server is up
            assert line and time.monotonic() < deadline, f"the demo did not start: {line!r}"
        server = _children(proc.pid)
        assert server, "the temporary Prefect server is a child of the command"
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
    assert proc.returncode == 130 and "ludic: interrupted" in rest, rest[-2000:]
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in server) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [pid for pid in server if Path(f"/proc/{pid}").exists()]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the temporary Prefect server outlived the killed command"


def test_run_as_a_deployment_checks_the_config_here_first(tmp_path, monkeypatch, capsys):
    """`ludic run FLOW --config FILE --deployment`: a bad field is named before any server
    is asked; a good config with no server configured says which setting is missing."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.cli import main

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text("model_path: m\ndataset_path: d\ntrainer: {lr: 0.001, learning_rate: 0.1}\n")
    good.write_text("model_path: m\ndataset_path: d\ntrainer: {lr: 0.001}\n")
    # No server configured, whatever an earlier test or the user's profile left in Prefect's settings.
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["run", "sft", "--config", str(bad), "--deployment"]) == 2
        assert "trainer.learning_rate" in capsys.readouterr().err
        assert main(["run", "sft", "--config", str(good), "--deployment"]) == 2
        assert "PREFECT_API_URL" in capsys.readouterr().err
