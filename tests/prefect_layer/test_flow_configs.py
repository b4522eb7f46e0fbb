"""Flow configs mean what they show: a partial nested mapping changes only what it
names (the flow's own nested defaults stay), derived values follow their source
or are refused when they disagree, on every path a config takes: the model
itself, the server's check at trigger time, and Prefect's parameter validation in
the flow run (what a deployment's run does with its dict). A real run given a
dict: tests/prefect_layer/test_flows.py (its SFT flow test checks the lr schedule)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from flows.cli import FLOWS, load_flow
from flows.examples import required_values
from ludic_core.compose.configs import ComponentConfig
from ludic_core.frozen import FrozenModel

SFT = {"model_path": "m", "dataset_path": "d"}
RL = {"model_path": "m", "env": {"name": "arithmetic"}}


def _nested_defaults():
    """(flow, field) for every field of a flow config whose default is a model."""
    for flow in sorted(FLOWS):
        cls = load_flow(flow)[1]
        for name, field in cls.model_fields.items():
            if isinstance(field.default, BaseModel):
                yield flow, name


@pytest.mark.parametrize("flow, field", list(_nested_defaults()))
def test_an_empty_nested_mapping_changes_nothing(flow, field):
    """`field: {}` is the flow's default for it, not the nested class's defaults."""
    cls, required = load_flow(flow)[1], required_values(flow)
    assert cls.model_validate({**required, field: {}}) == cls.model_validate(required)


def test_sft_trainer_lr_alone_keeps_the_flows_schedule():
    """The newcomer's case: `trainer: {lr: 0.001}` used to switch SFT to a constant
    schedule, no warmup and max_seq_len 1024 (TrainerConfig's class defaults)."""
    from flows.sft import SupervisedFinetuneConfig

    cfg = SupervisedFinetuneConfig.model_validate({**SFT, "trainer": {"lr": 0.001}})
    default = SupervisedFinetuneConfig.model_fields["trainer"].default
    assert cfg.trainer == default.model_copy(update={"lr": 0.001})
    assert (cfg.trainer.schedule, cfg.trainer.warmup_steps, cfg.trainer.max_seq_len) == ("cosine", 10, 512)


def test_rl_train_partials_keep_their_siblings():
    from flows.rl_train import RLTrainConfig

    cfg = RLTrainConfig.model_validate({**RL, "algorithm": {"clip_high": 0.28}, "schedule": {"stride": 2},
                                        "trainer": {"lr": 3e-5}, "agent": {"sampling": {"temperature": 0.7}}})
    assert cfg.algorithm.type == "grpo" and cfg.algorithm.group_size == 8 and cfg.algorithm.clip_high == 0.28
    assert (cfg.schedule.start, cfg.schedule.stride) == (1_000, 2)
    assert (cfg.trainer.lr, cfg.trainer.micro_token_budget, cfg.trainer.max_seq_len) == (3e-5, 16384, 512)
    assert cfg.agent.sampling.temperature == 0.7 and cfg.agent.sampling.max_tokens == 64


@pytest.mark.parametrize("flow", ["pipeline_rl", "pipeline_trainer"])
def test_max_lag_is_stated_once_on_the_trainer(flow):
    """One staleness rule: the pipelines' queue filter reads `trainer.max_lag` (the
    pipelines default it to 1; rl_train keeps every item). The old top-level field is
    refused with its new place, not as an unknown key."""
    cls, required = load_flow(flow)[1], required_values(flow)
    assert cls.model_validate(required).trainer.max_lag == 1
    assert cls.model_validate({**required, "trainer": {"lr": 3e-5}}).trainer.max_lag == 1
    assert cls.model_validate({**required, "trainer": {"max_lag": None}}).trainer.max_lag is None
    with pytest.raises(ValidationError, match="max_lag moved to trainer.max_lag"):
        cls.model_validate({**required, "max_lag": 2})
    assert load_flow("rl_train")[1].model_validate(RL).trainer.max_lag is None


def test_a_mapping_naming_another_kind_replaces_the_default():
    """Fields belong to what they configure: another algorithm `type` or another
    component `name` starts from that thing's own defaults, never the old one's kwargs."""
    from flows.rl_train import RLTrainConfig

    class Holder(FrozenModel):
        context: ComponentConfig = ComponentConfig(name="sliding_window", kwargs={"keep_last": 1})

    assert Holder.model_validate({"context": {"kwargs": {"keep_last": 2}}}).context.name == "sliding_window"
    assert Holder.model_validate({"context": {"name": "full_dialog"}}).context.kwargs == {}
    assert RLTrainConfig.model_validate({**RL, "algorithm": {"type": "cispo", "group_size": 4}}).algorithm.type \
        == "cispo"  # GRPO's clip_low/clip_high are not carried over (CISPO forbids them)
    with pytest.raises(ValidationError, match="group_size"):
        RLTrainConfig.model_validate({**RL, "algorithm": {"type": "gspo"}})  # not GRPO's group_size either


@pytest.mark.parametrize("flow", ["sft", "rl_train", "pipeline_rl", "pipeline_trainer"])
def test_total_steps_follows_steps(flow):
    cls, required = load_flow(flow)[1], required_values(flow)
    assert cls.model_validate({**required, "steps": 200}).trainer.total_steps == 200
    assert cls.model_validate({**required, "steps": 200, "trainer": {"lr": 1e-3}}).trainer.total_steps == 200
    assert cls.model_validate({**required, "steps": 200, "trainer": {"total_steps": 200}}).trainer.total_steps == 200
    with pytest.raises(ValidationError, match=r"trainer.total_steps=300 disagrees with steps=200"):
        cls.model_validate({**required, "steps": 200, "trainer": {"total_steps": 300}})


def test_total_steps_follows_steps_for_a_trainer_instance_too():
    from flows.sft import SupervisedFinetuneConfig
    from ludic_core.config import TrainerConfig

    assert SupervisedFinetuneConfig(**SFT, steps=7, trainer=TrainerConfig(lr=1e-3)).trainer.total_steps == 7
    with pytest.raises(ValidationError, match="disagrees"):
        SupervisedFinetuneConfig(**SFT, steps=7, trainer=TrainerConfig(schedule="cosine", total_steps=9))
    with pytest.raises(ValidationError) as info:  # a bad source is reported once, by its own name
        SupervisedFinetuneConfig.model_validate({**SFT, "steps": 0})
    assert [e["loc"] for e in info.value.errors()] == [("steps",)]


def test_the_prefect_parameter_path_merges_partials():
    """A deployment's run hands its flow a dict: the server checks it against the
    flow's schema (a partial nested mapping passes), then the flow-run engine calls
    `flow.validate_parameters` (what Prefect does in the worker's process)."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    from flows.sft import sft

    params = {"cfg": {**SFT, "steps": 200, "trainer": {"lr": 0.001}}}
    validate(params, parameter_schema(sft).model_dump_for_openapi(), raise_on_error=True, ignore_required=True)
    cfg = sft.validate_parameters(params)["cfg"]
    assert (cfg.trainer.lr, cfg.trainer.schedule, cfg.trainer.warmup_steps, cfg.trainer.total_steps) == \
           (0.001, "cosine", 10, 200)


@pytest.mark.parametrize("flow", ["sft", "rl_train", "pipeline_rl", "pipeline_trainer"])
def test_a_form_that_sends_every_default_back_can_change_steps(flow):
    """Prefect's "Custom run" form submits every default the flow's schema shows (seen
    in the UI: `seed`, `samples`, `sampling.top_p`, ... all come back). So the schema
    shows no default for a derived value; a form run with other `steps` then trains
    for those steps instead of being refused over a stale `total_steps`."""
    from prefect.utilities.callables import parameter_schema

    fn, cls = load_flow(flow)
    schema = parameter_schema(fn).model_dump_for_openapi()
    properties = schema["definitions"][cls.__name__]["properties"]
    assert "total_steps" not in properties["trainer"]["default"]
    form = {name: prop["default"] for name, prop in properties.items() if "default" in prop}
    cfg = fn.validate_parameters({"cfg": {**form, **required_values(flow), "steps": 37}})["cfg"]
    assert cfg.trainer.total_steps == 37


@pytest.mark.parametrize("flow", ["rl_train", "pipeline_rl"])
def test_the_form_shows_rollout_reuse_and_a_form_run_sets_it(flow):
    """Rollout reuse is a field of the algorithm in the run form: the schema shows its two
    knobs with their defaults, and a form run that changes them trains with them."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    fn, cls = load_flow(flow)
    schema = parameter_schema(fn).model_dump_for_openapi()
    reuse = schema["definitions"]["RolloutReuse"]["properties"]
    assert set(reuse) == {"mini_batches", "epochs"} and reuse["mini_batches"]["default"] == 1
    algorithm = {"type": "grpo", "group_size": 4, "reuse": {"mini_batches": 2, "epochs": 2}}
    params = {"cfg": {**required_values(flow), "algorithm": algorithm,
                      "trainer": {"max_lag": 4}}}
    validate(params, schema, raise_on_error=True, ignore_required=True)
    cfg = fn.validate_parameters(params)["cfg"]
    assert (cfg.algorithm.reuse.mini_batches, cfg.algorithm.reuse.epochs, cfg.algorithm.reuse.updates) == (2, 2, 4)


def test_renamed_flow_configs_stay_importable_for_a_release():
    """Issue 56: `TrainingConfig` read like `TrainerConfig` and `SFTFlowConfig` like `SFTConfig`
    (the algorithm's), so the flows' ones were renamed; an old name still resolves to the new
    class, with a DeprecationWarning naming it, and a made-up name is still an AttributeError."""
    import flows.common
    import flows.sft

    with pytest.warns(DeprecationWarning, match=r"flows\.sft\.SupervisedFinetuneConfig"):
        from flows.sft import SFTFlowConfig
    assert SFTFlowConfig is flows.sft.SupervisedFinetuneConfig
    with pytest.warns(DeprecationWarning, match=r"flows\.common\.MultiNodeLaunchConfig"):
        from flows.common import TrainingConfig
    assert TrainingConfig is flows.common.MultiNodeLaunchConfig
    with pytest.raises(AttributeError, match="NoSuchConfig"):
        flows.sft.NoSuchConfig  # noqa: B018
