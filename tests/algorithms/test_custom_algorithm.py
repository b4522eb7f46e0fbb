"""A credit assigner and a loss of the user's own, from a config (`algorithm: {type: custom}`).

The user's package lives outside the project, as a user's env package does: the example of
docs/custom-algorithm.md, written to a temporary directory put on sys.path. Its names go
through the registry that resolves envs, are kind-checked before anything is called, and the
algorithm trains through rl_train's stage code on the tiny model.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import yaml

from flows.rl_train import RLTrainConfig, stage_spec
from ludic_core.algorithms import CustomConfig, build_algorithm, make_grpo
from ludic_core.compose.build import check_algorithm
from ludic_core.registry import ComponentError
from tests.doc_snippets import DOCS, python_blocks_in, section

PAGE = DOCS / "custom-algorithm.md"

#: beside the page's module: things that are not a credit or a loss
OTHER = '''
from pathlib import Path

SCALE = 0.5  # not callable

def unannotated():  # callable, but says nothing of what it builds
    return None

class Loud:
    """Would leave a mark if it were ever called: a kind check must refuse it first."""
    def __init__(self, **kwargs):
        Path(kwargs.get("mark", "called")).write_text("called")
'''


@pytest.fixture
def my_pkg(tmp_path, monkeypatch):
    """docs' example as my_pkg/algo.py (and my_pkg/other.py) in a directory on sys.path."""
    for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
        monkeypatch.delitem(sys.modules, name)
    (code,) = python_blocks_in(PAGE, "A credit assigner and a loss")
    pkg = tmp_path / "user_code" / "my_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "algo.py").write_text(code)
    (pkg / "other.py").write_text(OTHER)
    monkeypatch.syspath_prepend(str(tmp_path / "user_code"))
    return tmp_path


def _page_config(**changes) -> RLTrainConfig:
    (block,) = re.findall(r"```yaml\n(.*?)```", section(PAGE, "Run it through rl_train"), re.S)[:1]
    return RLTrainConfig.model_validate({**yaml.safe_load(block), **changes})


def test_the_page_example_trains_through_rl_train(my_pkg, tiny_model_dir):
    from ludic_core.stages.run import run_stage

    cfg = _page_config(model_path=str(tiny_model_dir), out_dir=str(my_pkg / "rl"))
    cfg.preflight()  # the env, the agent and the algorithm resolve, pass their kind checks and build
    algorithm = build_algorithm(cfg.algorithm)
    assert type(algorithm.credit_assigner).__module__ == "my_pkg.algo"
    assert type(algorithm.loss).__name__ == "ScaledPG" and algorithm.loss.scale == 0.5
    assert algorithm.request_strategy(0).group_size == 4 and cfg.algorithm.samples_per_prompt() == 4

    result = run_stage(stage_spec(cfg))
    assert result["step"] == cfg.steps == 4
    steps = [json.loads(line) for line in (my_pkg / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    # the user's loss ran and its metric was logged; the user's credit gave +1 or -1 to most episodes
    assert all(0.5 < s["adv_abs"] <= 1.0 and s["signal_groups"] > 0 for s in steps), steps
    assert all(s["rollouts"] == 16 for s in steps)  # 4 prompts x group_size 4


def test_the_second_yaml_block_is_the_same_algorithm(my_pkg):
    """The form/parameters value on the page is the config file's algorithm."""
    blocks = re.findall(r"```yaml\n(.*?)```", section(PAGE, "Run it through rl_train"), re.S)
    fragment = yaml.safe_load(blocks[1])["algorithm"]
    assert CustomConfig.model_validate(fragment) == _page_config(model_path="m").algorithm


WRONG = [
    ({"credit": "my_pkg.algo:ScaledPG"},  # a loss given as the credit
     "algorithm.credit: credit 'my_pkg.algo:ScaledPG' is a class (my_pkg.algo.ScaledPG) that is not a credit "
     "assigner ("),
    ({"loss": "my_pkg.algo:SignOfAdvantage"},  # a credit given as the loss
     "algorithm.loss: loss 'my_pkg.algo:SignOfAdvantage' is a class (my_pkg.algo.SignOfAdvantage) that is not a "
     "loss ("),
    ({"credit": "my_pkg.other:SCALE"}, "algorithm.credit: credit 'my_pkg.other:SCALE' resolves to a float, not a "
                                       "class or function"),
    ({"loss": "my_pkg.other:unannotated"}, "algorithm.loss: loss 'my_pkg.other:unannotated' is a function that is "
                                           "not a loss"),
    ({"credit": "my_pkg.gone:Credit"}, "algorithm.credit: credit 'my_pkg.gone:Credit': cannot import module "
                                       "'my_pkg.gone'"),
    ({"loss": "no_such_pkg.losses:Mine"}, "algorithm.loss: loss 'no_such_pkg.losses:Mine': cannot import module "
                                          "'no_such_pkg.losses'"),
    ({"loss": "gspo_loss"}, "algorithm.loss: unknown loss 'gspo_loss'; registered names: ["),
    ({"loss_kwargs": {"scal": 1.0}}, "algorithm.loss: loss 'my_pkg.algo:ScaledPG' (its loss_kwargs) takes no "
                                     "parameter 'scal'"),
    ({"credit": "group_norm", "credit_kwargs": {"eps": -1.0}},
     "algorithm.credit: credit 'group_norm' failed to build from its credit_kwargs: ValueError: eps must be >= 0"),
]


@pytest.mark.parametrize("change, message", WRONG, ids=[m.split(":")[0] + ":" + str(c) for c, m in WRONG])
def test_a_wrong_component_is_refused_naming_the_field(my_pkg, change, message):
    cfg = _page_config(model_path="m", algorithm={**_page_config(model_path="m").algorithm.model_dump(), **change})
    with pytest.raises(ComponentError) as err:
        check_algorithm(cfg.algorithm)  # what the flow's preflight and every stage run
    assert str(err.value).startswith(message), str(err.value)


def test_the_page_quotes_the_error_of_a_loss_given_as_the_credit():
    assert f"`{WRONG[0][1]}...)`" in " ".join(PAGE.read_text().split())


def test_nothing_is_called_before_the_kind_check(my_pkg):
    mark = my_pkg / "mark"
    for field in ("credit", "loss"):
        cfg = CustomConfig.model_validate({"credit": "group_norm", "loss": "reinforce", field: "my_pkg.other:Loud",
                                           f"{field}_kwargs": {"mark": str(mark)}})
        with pytest.raises(ComponentError, match=f"^algorithm.{field}: {field} 'my_pkg.other:Loud' is a class"):
            cfg.build()
    assert not mark.exists()


def test_a_config_validates_where_the_package_is_not_installed():
    """Names are checked for syntax only (the Prefect server validates forms without the user's
    package); a malformed one is refused naming the field."""
    cfg = RLTrainConfig.model_validate({"model_path": "m", "env": {"name": "tic_tac_toe"}, "algorithm": {
        "type": "custom", "credit": "not_installed.mod:Credit", "loss": "not_installed.mod:Loss", "group_size": 2}})
    assert cfg.algorithm.samples_per_prompt() == 2
    with pytest.raises(ValueError, match=r"algorithm\.custom\.loss\n.*loss 'not a name' is neither a registered"):
        RLTrainConfig.model_validate({"model_path": "m", "env": {"name": "tic_tac_toe"}, "algorithm": {
            "type": "custom", "credit": "group_norm", "loss": "not a name"}})
    with pytest.raises(ValueError, match="dynamic_sampling keeps the groups whose episodes differ"):
        CustomConfig(credit="group_norm", loss="reinforce", dynamic_sampling={"min_groups": 2})


def test_bundled_parts_by_name_make_grpo():
    """A custom algorithm of the bundled credit and loss is GRPO: the same parts, the same groups."""
    custom = CustomConfig(credit="group_norm", credit_kwargs={"expected_group_size": 4}, loss="clipped_surrogate",
                          group_size=4).build()
    grpo = make_grpo(group_size=4)
    assert (custom.credit_assigner, custom.loss, custom.group_size) == (grpo.credit_assigner, grpo.loss, 4)
    assert custom.requires_actor_logprobs and custom.name == "custom"
