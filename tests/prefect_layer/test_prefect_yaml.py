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
    assert set(deployments) == set(FLOWS)
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


@pytest.mark.parametrize("path, bad, field", [
    (("trainer",), {"learning_rate": 0.1}, "learning_rate"),  # unknown nested field
    ((), {"stepz": 3}, "stepz"),                                  # unknown top-level field
    ((), {"steps": 0}, "steps"),                                  # out of range
])
def test_corrupted_copy_fails_naming_the_field(deployments, path, bad, field):
    d = copy.deepcopy(deployments["sft"])
    target = d["parameters"]["cfg"]
    for key in path:
        target = target[key]
    target.update(bad)
    flow = _load_entrypoint(d["entrypoint"])
    with pytest.raises(ValidationError) as info:
        _cfg_model(flow).model_validate(d["parameters"]["cfg"])
    assert [err["loc"] for err in info.value.errors()] == [(*path, field)]
    assert field in str(info.value)
    # ... and the server's check at trigger time rejects it too, naming it.
    from prefect.utilities.schema_tools.validation import ValidationError as SchemaError

    with pytest.raises(SchemaError, match=field):
        _server_check(flow, d["parameters"])
