"""prefect.yaml's chain (docs/chains.md), checked without a server: the `chain-*`
deployments, their triggers as `prefect deploy` parses them, and each trigger's
parameters rendered the way the server renders them (Prefect's own v1-template
upgrade and hydration, Jinja included) from a made-up upstream run: the result
validates against the downstream flow's config and carries the chain on.
The real thing, on a server with a worker: test_chains.py."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import pytest
import yaml

from flows.cli import FLOWS, load_flow

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ("rejection_sampling", "sft", "rl_train", "evaluate")  # each stage triggers the next


@pytest.fixture(scope="module")
def deployments() -> dict[str, dict]:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["name"]: d for d in spec["deployments"]}


def render(parameters: dict, flow_run: dict) -> dict:
    """A trigger's parameters as the RunDeployment action renders them for `flow_run`."""
    from prefect.server.events.actions import RunDeployment
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    parameters = copy.deepcopy(parameters)
    RunDeployment._upgrade_v1_templates(parameters)
    return hydrate(parameters, HydrationContext(raise_on_error=True, render_jinja=True,
                                                jinja_context={"flow_run": flow_run},
                                                render_workspace_variables=True, workspace_variables={}))


def test_the_chain_deployments_mirror_the_flows(deployments):
    chain = {name for name in deployments if name.startswith("chain-")}
    assert chain == {f"chain-{stage}" for stage in CHAIN}
    for stage in CHAIN:
        d = deployments[f"chain-{stage}"]
        assert d["entrypoint"] == deployments[stage]["entrypoint"]
        assert "ludic-chain" in d["tags"] and d["enforce_parameter_schema"] is True
        cfg = load_flow(stage)[1].model_validate(d["parameters"]["cfg"])  # a hand re-run's defaults
        assert cfg.chain is not None and cfg.chain.id == "example" and cfg.chain.upstream_run is None
    assert "triggers" not in deployments["chain-rejection_sampling"]  # the chain's start: run by hand
    for name in FLOWS:  # the hand-run deployments start nothing
        assert "triggers" not in deployments[name], name


@pytest.mark.parametrize("upstream, stage", list(zip(CHAIN, CHAIN[1:])))
def test_each_trigger_waits_for_its_upstream_stage_to_complete(deployments, upstream, stage):
    from prefect.cli.deploy._triggers import DeploymentTriggerAdapter
    from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger
    from prefect.server.events.actions import RunDeployment

    [spec] = deployments[f"chain-{stage}"]["triggers"]
    trigger = DeploymentTriggerAdapter.validate_python(copy.deepcopy(spec))  # what `prefect deploy` does
    assert isinstance(trigger, DeploymentEventTrigger)
    assert trigger.expect == {"prefect.flow-run.Completed"}  # Failed / Cancelled / Crashed never fire it
    assert trigger.posture.value == "Reactive" and trigger.threshold == 1 and trigger.enabled
    assert trigger.match.root == {"prefect.resource.id": "prefect.flow-run.*"}
    related = [m.root for m in trigger.match_related]
    assert related == [{"prefect.resource.role": "flow", "prefect.resource.name": upstream},
                       {"prefect.resource.role": "deployment", "prefect.resource.name": f"chain-{upstream}"}]
    # the automation the server stores: its action runs this deployment with the templated parameters
    trigger.set_deployment_id(uuid.uuid4())
    automation = trigger.as_automation()
    [action] = automation.actions
    assert action.type == "run-deployment" and action.parameters == spec["parameters"]
    RunDeployment(source="selected", deployment_id=uuid.uuid4(), parameters=spec["parameters"])  # the server's check


def _upstream_run(deployments, stage: str, chain_id: str) -> dict:
    cfg = copy.deepcopy(deployments[f"chain-{stage}"]["parameters"]["cfg"])
    cfg["chain"] = {"id": chain_id}
    if "out_dir" in cfg:
        cfg["out_dir"] = cfg["out_dir"].replace("/example/", f"/{chain_id}/")
    return {"id": uuid.uuid4(), "name": "brave-otter", "parameters": {"cfg": cfg}}


@pytest.mark.parametrize("upstream, stage", list(zip(CHAIN, CHAIN[1:])))
def test_each_hop_carries_the_chain_id_the_upstream_run_and_its_output(deployments, upstream, stage):
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    run = _upstream_run(deployments, upstream, "night-7")
    params = render(deployments[f"chain-{stage}"]["triggers"][0]["parameters"], run)
    flow, model = load_flow(stage)
    validate(params, parameter_schema(flow).model_dump_for_openapi(), raise_on_error=True)  # the server's check
    cfg = model.model_validate(params["cfg"])
    assert cfg.chain.id == "night-7" and cfg.chain.upstream_run == str(run["id"])
    up = run["parameters"]["cfg"]
    if stage == "sft":
        assert (cfg.model_path, cfg.dataset_path) == (up["student_path"], "runs/chains/night-7/rejection/dataset")
    elif stage == "rl_train":
        assert cfg.model_path == f"runs/chains/night-7/sft/checkpoints/step_{up['steps']:08d}/model"
    else:
        assert cfg.policy.model_path == f"runs/chains/night-7/rl/checkpoints/step_{up['steps']:08d}/model"
    if stage != "evaluate":
        assert cfg.out_dir == f"runs/chains/night-7/{'rl' if stage == 'rl_train' else stage}"
    # everything else is the chain deployment's own cfg
    own = deployments[f"chain-{stage}"]["parameters"]["cfg"]
    assert {k: v for k, v in params["cfg"].items() if k not in ("chain", "model_path", "dataset_path", "out_dir",
                                                                "policy")} == \
           {k: v for k, v in own.items() if k not in ("chain", "model_path", "dataset_path", "out_dir", "policy")}


def test_an_out_dir_that_does_not_name_the_chain_is_refused():
    """Two chains must not share a directory (the second would skip on the first's outputs)."""
    from pydantic import ValidationError

    from flows.sft import SupervisedFinetuneConfig

    with pytest.raises(ValidationError, match="out_dir='runs/pipeline/sft' does not name chain 'night-7'"):
        SupervisedFinetuneConfig(model_path="m", dataset_path="d", out_dir="runs/pipeline/sft",
                                 chain={"id": "night-7"})
    with pytest.raises(ValidationError, match="chain.id"):
        SupervisedFinetuneConfig(model_path="m", dataset_path="d", out_dir="runs/x/sft", chain={"id": "../x"})
    assert SupervisedFinetuneConfig(model_path="m", dataset_path="d", out_dir="runs/chains/night-7/sft",
                                    chain={"id": "night-7"}).chain.id == "night-7"


def test_a_failed_stage_names_its_chain_and_a_run_records_its_place(prefect_api, tmp_path, tiny_model_dir):
    """On the embedded API: a chain's stage that fails says so in its state message; a first
    stage (no upstream run) still records the chain in its `chain-lineage` artifact."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.sft import SupervisedFinetuneConfig, sft

    missing = tmp_path / "night-7" / "rejection" / "dataset"
    cfg = SupervisedFinetuneConfig(model_path=str(tiny_model_dir), dataset_path=str(missing),
                                   out_dir=str(tmp_path / "night-7" / "sft"), chain={"id": "night-7"})
    state = sft(cfg, return_state=True)
    assert state.is_failed()
    assert state.message.startswith("Flow run encountered an exception: ChainStageFailed: chain 'night-7' stopped "
                                    "at stage sft: FileNotFoundError: dataset_path: no dataset at"), state.message
    assert "the stages after it get no run" in state.message
    with get_client(sync_client=True) as client:
        run_id = state.state_details.flow_run_id
        [lineage] = [a for a in client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
                     if a.key == "chain-lineage"]
    assert "| chain | `night-7` |" in lineage.data and "(the chain's first stage)" in lineage.data
    assert str(missing) in lineage.data
