"""prefect.yaml, checked without a server: every deployment's entrypoint is a
Prefect flow taking one `cfg`, and its `parameters.cfg` validates against that
flow's config model (a typo'd or invalid field fails here, naming it, not at
3 a.m. when the schedule fires)."""

from __future__ import annotations

import copy
import importlib.util
import inspect
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from flows.cli import FLOWS

ROOT = Path(__file__).resolve().parents[2]
POOL = "ludic-process"


@pytest.fixture(scope="module")
def spec() -> dict:
    return yaml.safe_load((ROOT / "prefect.yaml").read_text())


@pytest.fixture(scope="module")
def deployments(spec) -> dict[str, dict]:
    names = [d["name"] for d in spec["deployments"]]
    assert len(names) == len(set(names)), f"duplicate deployment names: {names}"
    return {d["name"]: d for d in spec["deployments"]}


def _load_entrypoint(entrypoint: str):
    """The object an entrypoint `path/to/file.py:name` names (as Prefect loads it: by path)."""
    path, _, name = entrypoint.partition(":")
    assert (ROOT / path).is_file(), f"{entrypoint}: no such file"
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    assert Path(module.__file__).resolve() == (ROOT / path).resolve()
    return getattr(module, name)


def _server_check(flow, parameters: dict) -> None:
    """What the server does on a trigger when `enforce_parameter_schema` is on:
    JSON-schema validation against the flow's parameter schema (required fields
    ignored, so a missing field only fails when the run starts)."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    schema = parameter_schema(flow).model_dump_for_openapi()
    validate(parameters, schema, raise_on_error=True, ignore_required=True)


def _cfg_model(flow) -> type[BaseModel]:
    params = list(inspect.signature(flow.fn).parameters)
    assert params == ["cfg"], f"{flow.name}: a flow takes exactly one parameter `cfg`, got {params}"
    model = typing.get_type_hints(flow.fn)["cfg"]
    assert isinstance(model, type) and issubclass(model, BaseModel), f"{flow.name}: cfg is {model!r}"
    assert model.model_config.get("extra") == "forbid" and model.model_config.get("frozen")
    return model


def test_file_shape(spec):
    from prefect.cli.deploy._models import DeploymentConfig, PrefectYamlModel

    PrefectYamlModel.model_validate(spec)  # what `prefect deploy` itself parses
    assert spec["build"] is None and spec["push"] is None
    [step] = spec["pull"]
    assert step == {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $PWD }}"}}
    # Prefect ignores unknown deployment keys silently: catch a typo'd key here.
    for d in spec["deployments"]:
        unknown = set(d) - set(DeploymentConfig.model_fields)
        assert not unknown, f"deployment {d['name']!r}: unknown keys {unknown}"


def test_every_flow_has_a_deployment(deployments):
    # plus the chain's `chain-*` copies, which start one another (tests/prefect_layer/test_chain_triggers.py)
    assert {name for name in deployments if not name.startswith("chain-")} == set(FLOWS)
    for name, (module, fn, _) in FLOWS.items():
        assert deployments[name]["entrypoint"] == f"{module.replace('.', '/')}.py:{fn}"


@pytest.mark.parametrize("name", sorted(FLOWS))
def test_deployment_parameters_validate(deployments, name):
    from prefect import Flow

    d = deployments[name]
    flow = _load_entrypoint(d["entrypoint"])
    assert isinstance(flow, Flow), f"{d['entrypoint']} is not a Prefect flow"
    model = _cfg_model(flow)
    assert model.__name__ == FLOWS[name][2]
    assert set(d["parameters"]) == {"cfg"}
    model.model_validate(d["parameters"]["cfg"])
    _server_check(flow, d["parameters"])
    assert d["work_pool"]["name"] == POOL
    assert d["enforce_parameter_schema"] is True


def test_schedules_are_examples_only(deployments):
    scheduled = {name for name, d in deployments.items() if d.get("schedules")}
    assert {"rl_train", "evaluate"} <= scheduled
    for name in scheduled:
        for schedule in deployments[name]["schedules"]:
            assert schedule.get("active") is False, f"{name}: schedule {schedule} must be inactive"


def test_shared_definitions_are_the_tic_tac_toe_recipe(spec, deployments):
    """The YAML anchors (`&ttt_env`, `&ttt_agent`) and the merge key (`<<: *ttt_agent`)
    resolve to the recipe's own configs, so the chain's stages play the same game."""
    from ludic_core.compose.configs import AgentConfig, EnvConfig
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV, RECIPE

    assert EnvConfig.model_validate(spec["definitions"]["env"]) == ENV
    assert AgentConfig.model_validate(spec["definitions"]["agent"]) == AGENT
    for name in ("rejection_sampling", "rl_train", "evaluate"):
        assert EnvConfig.model_validate(deployments[name]["parameters"]["cfg"]["env"]) == ENV, name
    for name in ("rejection_sampling", "evaluate"):
        assert AgentConfig.model_validate(deployments[name]["parameters"]["cfg"]["agent"]) == AGENT, name
    # rl_train: the shared agent merged in, only its sampling overridden. T 0.7 is the hand-run
    # pipeline's own (the minimax teacher's student, the game's outcome); the demo's RL samples at
    # RECIPE.rl_temperature for its per-move reward
    assert deployments["rejection_sampling"]["parameters"]["cfg"]["keep"] == RECIPE.keep.model_dump(exclude_defaults=True)
    rl_agent = AgentConfig.model_validate(deployments["rl_train"]["parameters"]["cfg"]["agent"])
    assert rl_agent == AGENT.model_copy(update={"sampling": AGENT.sampling.model_copy(update={"temperature": 0.7})})


@pytest.mark.parametrize("name, path, bad, field", [
    ("sft", (), {"stepz": 3}, "stepz"),                                       # unknown top-level field
    ("sft", (), {"steps": 0}, "steps"),                                       # out of range
    ("sft", ("trainer",), {"learning_rate": 0.1}, "learning_rate"),           # unknown field of a default
    ("rl_train", ("agent", "sampling"), {"temprature": 0.5}, "temprature"),   # unknown field under a merge key
    ("rl_train", ("env",), {"kwarg": {}}, "kwarg"),                           # unknown field of an anchor
    ("evaluate", ("policy",), {"model_pth": "m"}, "model_pth"),               # unknown field of a union member
    ("rejection_sampling", ("keep",), {"min_return": "high"}, "min_return"),  # wrong type
])
def test_corrupted_copy_fails_naming_the_field(deployments, name, path, bad, field):
    d = copy.deepcopy(deployments[name])
    target = d["parameters"]["cfg"]
    for key in path:
        target = target.setdefault(key, {})
    target.update(bad)
    flow = _load_entrypoint(d["entrypoint"])
    with pytest.raises(ValidationError) as info:
        _cfg_model(flow).model_validate(d["parameters"]["cfg"])
    locs = [err["loc"] for err in info.value.errors()]
    # a union member's errors are located under its tag (policy.model.model_pth)
    assert all(loc[:len(path)] == path and loc[-1] == field for loc in locs), locs
    assert field in str(info.value)
    # ... and the server's check at trigger time rejects it too, naming it.
    from prefect.utilities.schema_tools.validation import ValidationError as SchemaError

    with pytest.raises(SchemaError, match=field):
        _server_check(flow, d["parameters"])


def test_a_typo_in_a_shared_definition_fails_every_deployment_using_it():
    """An anchor is stated once and aliased: a typo there must fail each deployment
    that aliases it (directly, or merged in with `<<:`), naming the field."""
    text = (ROOT / "prefect.yaml").read_text()
    anchor = "  agent: &ttt_agent\n"
    assert text.count(anchor) == 1
    spec = yaml.safe_load(text.replace(anchor, anchor + "    max_turnz: 9\n"))
    failing = set()
    for d in spec["deployments"]:
        flow = _load_entrypoint(d["entrypoint"])
        try:
            _cfg_model(flow).model_validate(d["parameters"]["cfg"])
        except ValidationError as exc:
            assert [e["loc"] for e in exc.errors()] == [("agent", "max_turnz")], (d["name"], exc)
            failing.add(d["name"])
    users = {d["name"] for d in spec["deployments"] if "agent" in d["parameters"]["cfg"]}
    assert "rl_train" in users and failing == users  # rl_train takes it through the merge key
