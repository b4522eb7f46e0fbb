"""The demo chain: rejection sampling -> SFT -> RL, tiny model, CPU, on a recipe.

The generic flows with one recipe's settings (`ludic_core.recipes`:
tic-tac-toe by default, arithmetic, a reasoning-gym mix, or TextArena's TicTacToe): nothing
here knows a game. Each
stage's output path is the next stage's input and is recorded in a lineage
artifact; evaluations of the teacher's own play, before SFT, after SFT and
after RL (the same episodes) become a table artifact and the flow's return value. Re-running after a crash skips the
stages whose outputs exist; a run dir written with other settings (an upgrade's new recipe defaults
included) is refused, since its outputs would be reused as if they were this run's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal, get_args

from prefect import flow
from pydantic import Field

from flows.chains import ChainStage
from flows.common import FlowConfig, MultiNodeLaunchConfig
from flows.rejection_sampling import RejectionSamplingConfig, rejection_sampling
from flows.rl_train import RLTrainConfig, rl_train
from flows.sft import SupervisedFinetuneConfig, sft
from ludic_core.algorithms import GroupAlgorithmBase
from ludic_core.bounds import MAX_EPISODES, MAX_GROUP, MAX_SEED, MAX_STEPS, bounded
from ludic_core.compose.configs import AgentConfig
from ludic_core.compose.policy import ModelPolicy, ScriptedPolicy, scripted_client
from ludic_core.config import RL_TRAINER, SFT_TRAINER, TrainerConfig
from ludic_core.recipes.recipe import RECIPES, Recipe, get_recipe
from tasks.artifacts import lineage_artifact, table_artifact
from tasks.evaluation import evaluate_policy
from tasks.models import build_model


#: the stages' outputs in a run dir (`DemoConfig.stage_dir`): reused when they exist
StageDir = Literal["models", "rejection", "sft", "rl"]


class DemoConfig(FlowConfig):
    recipe: Literal[RECIPES] = Field(RECIPES[0], description="env, agent and teacher settings")  # type: ignore[valid-type]
    run_dir: str | None = Field(None, description="everything the chain writes goes here (None = runs/demo/RECIPE)")
    preset: Literal["tiny-1m", "tiny-10m"] = "tiny-1m"
    seed: int = bounded(0, ge=0, le=MAX_SEED, description="seed of the tiny model and the trainers")
    teacher_kwargs: dict[str, Any] | None = Field(
        None, description="keyword arguments of the recipe's teacher, merged over the recipe's own (None = the "
                          "recipe's), e.g. {\"fallback\": \"centre\"} for tic-tac-toe")
    teacher_episodes: int | None = bounded(None, ge=1, le=MAX_EPISODES,
                                           description="episodes the teacher plays for rejection sampling "
                                                       "(None = the recipe's)")
    sft_steps: int | None = bounded(None, ge=1, le=MAX_STEPS, description="SFT steps (None = the recipe's)")
    sft_lr: float = Field(SFT_TRAINER.lr, gt=0, description="peak SFT learning rate (cosine decay to 0)")
    rl_steps: int | None = bounded(None, ge=1, le=MAX_STEPS, description="RL steps (None = the recipe's)")
    rl_lr: float | None = Field(None, gt=0, description="RL learning rate (None = the recipe's)")
    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP,
                                     description="GRPO samples per prompt (None = the recipe's)")
    eval_episodes: int | None = bounded(None, ge=1, le=MAX_EPISODES,
                                        description="greedy episodes per evaluation (None = the recipe's)")
    launcher: Literal["in_process", "torchrun"] = "in_process"
    progress_bar: bool = Field(True, description="console progress bars for training stages")

    @property
    def out(self) -> str:
        return self.run_dir or f"runs/demo/{self.recipe}"

    def stage_dir(self, stage: StageDir) -> str:
        """Where `stage` writes in the run dir: reused when it exists."""
        return f"{self.out}/{stage}"

    @property
    def model_dir(self) -> str:
        """The tiny model the chain starts from (built once)."""
        return f"{self.stage_dir('models')}/{self.preset}"

    def preflight(self) -> None:
        recipe = get_recipe(self.recipe)
        check_teacher(self, recipe)
        check_run_dir(self, recipe, record=False)


_STAGE_DIRS: tuple[StageDir, ...] = get_args(StageDir)
#: what a stage's output does not depend on: where and how it runs and reports, the chain's links,
#: and the paths the chain fills in
_PLUMBING = (set(MultiNodeLaunchConfig.model_fields) | set(ChainStage.model_fields)
             | {"model_path", "dataset_path", "student_path", "out_dir", "progress_bar", "wandb_block"})
SETTINGS_FILE = "demo-settings.json"


def stage_settings(cfg: DemoConfig, recipe: Recipe) -> dict[str, Any]:
    """What the stages' outputs depend on: the configs the chain hands its stages, as it builds them
    (so an override equal to the recipe's value is the same run), less the plumbing, and less the
    vLLM server's settings where the RL stage decodes in-process. The demo's own evaluations are
    redone each run and are not recorded (the RL stage's are off, its eval fields constant)."""
    rl = rl_stage(cfg, recipe, "<sft model>")
    stages = {"rejection": (rejection_stage(cfg, recipe, cfg.model_dir), _PLUMBING),
              "sft": (sft_stage(cfg, recipe, cfg.model_dir, "<dataset>"), _PLUMBING),
              "rl": (rl, _PLUMBING | ({"vllm"} if rl.inference == "local" else set()))}
    return {"model": {"recipe": cfg.recipe, "preset": cfg.preset, "seed": cfg.seed},
            **{name: stage.model_dump(mode="json", exclude=skip) for name, (stage, skip) in stages.items()}}


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def check_run_dir(cfg: DemoConfig, recipe: Recipe, *, record: bool = True) -> None:
    """Refuse a run dir whose stage outputs were made with other settings: the chain would reuse
    them and report another run's models as this one's (after an upgrade, the old recipe
    defaults'). `record` writes this run's settings there (atomically) before any stage runs,
    so a crash leaves them; a dir with no stage output yet has nothing to reuse."""
    out = Path(cfg.out)
    path, mine = out / SETTINGS_FILE, stage_settings(cfg, recipe)
    if any(Path(cfg.stage_dir(d)).exists() for d in _STAGE_DIRS):
        fix = f"delete {out}, or give another run_dir (`--out`)"
        unproven = f"so nothing shows the run dir's stage outputs match these settings: {fix}"
        if not path.exists():
            raise ValueError(f"run dir {out} holds stage outputs but no {SETTINGS_FILE} (a run of an older "
                             f"version, or made by hand), {unproven}")
        try:
            saved = json.loads(path.read_text())
        except ValueError as e:
            raise ValueError(f"{path} is not readable JSON ({e}), {unproven}") from None
        if not isinstance(saved, dict):
            raise ValueError(f"{path} holds {type(saved).__name__}, not the settings object: {fix}")
        if "model" not in saved:  # 'demo', 'recipe', 'sft_trainer', 'rl_trainer': recorded another way
            raise ValueError(f"{path} was recorded by an older version of the demo, in another form, {unproven}")
        before, now = _flat(saved), _flat(mine)
        diff = [f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in sorted(before.keys() | now.keys())
                if before.get(k) != now.get(k)]
        if diff:
            raise ValueError(f"run dir {out} holds a demo run made with other settings ({'; '.join(diff[:5])}"
                             f"{'; ...' if len(diff) > 5 else ''}); its stages would be reused: {fix}")
    if record:
        out.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{SETTINGS_FILE}.part")
        part.write_text(json.dumps(mine, indent=1, sort_keys=True))
        os.replace(part, path)


def _row(stage: str, recipe: Recipe, m: dict[str, float], seconds: float) -> dict:
    return {"stage": stage, **{col: round(m.get(key, float("nan")), 3) for col, key in recipe.table.items()},
            "seconds": round(seconds, 1)}


def _evaluate(model_path: str, recipe: Recipe, cfg: DemoConfig) -> dict[str, float]:
    return evaluate_policy(ModelPolicy(model_path=model_path), recipe.eval_env, recipe.agent,
                           seeds=_eval_seeds(recipe, cfg))


def _eval_seeds(recipe: Recipe, cfg: DemoConfig) -> list[int]:
    return list(range(recipe.eval_seed, recipe.eval_seed + (cfg.eval_episodes or recipe.eval_episodes)))


def teacher(cfg: DemoConfig, recipe: Recipe) -> ScriptedPolicy:
    """The recipe's teacher, with the demo's `teacher_kwargs` over the recipe's: what rejection
    sampling plays and the teacher's row scores (so the run-dir check covers them)."""
    return ScriptedPolicy(policy=recipe.teacher, kwargs={**recipe.teacher_kwargs, **(cfg.teacher_kwargs or {})})


def check_teacher(cfg: DemoConfig, recipe: Recipe) -> None:
    """Build the teacher once, before any stage runs: a mistyped keyword in `teacher_kwargs`, or a
    value its factory refuses, fails here naming it rather than inside the first stage."""
    spec = teacher(cfg, recipe)
    try:
        scripted_client(spec, None)
    except (TypeError, ValueError) as e:
        raise ValueError(f"the demo's teacher {spec.policy!r} with kwargs {spec.kwargs}: {e}") from None


def _evaluate_teacher(recipe: Recipe, cfg: DemoConfig) -> dict[str, float]:
    """The teacher's own play on the same episodes: the row a student has to pass."""
    return evaluate_policy(teacher(cfg, recipe), recipe.eval_env, recipe.agent, seeds=_eval_seeds(recipe, cfg))


def rejection_stage(cfg: DemoConfig, recipe: Recipe, model_path: str) -> RejectionSamplingConfig:
    """Rejection sampling of the recipe's teacher: its episodes, keep rule and env."""
    return RejectionSamplingConfig(
        env=recipe.env, agent=recipe.agent, student_path=model_path,
        prompts=cfg.teacher_episodes or recipe.teacher_episodes,
        teacher=teacher(cfg, recipe), keep=recipe.keep, out_dir=cfg.stage_dir("rejection"))


def teacher_data(cfg: DemoConfig, recipe: Recipe, model_path: str) -> str:
    """Rejection sampling from the recipe's teacher, tokenised for `model_path`:
    the dataset dir (made once; a rerun finds it)."""
    return rejection_sampling(rejection_stage(cfg, recipe, model_path))


def sft_stage(cfg: DemoConfig, recipe: Recipe, model_path: str, dataset: str) -> SupervisedFinetuneConfig:
    """SFT of `model_path` on `dataset` at the recipe's steps and batch size (the demo may override the steps)."""
    steps = cfg.sft_steps or recipe.sft_steps
    return SupervisedFinetuneConfig(
        model_path=model_path, dataset_path=dataset, out_dir=cfg.stage_dir("sft"), steps=steps,
        batch_size=recipe.sft_batch_size, steps_per_stage=max(steps // 4, 1), launcher=cfg.launcher,
        progress_bar=cfg.progress_bar, trainer=sft_trainer(cfg, recipe, steps))


def teacher_to_sft(cfg: DemoConfig, recipe: Recipe, model_path: str) -> tuple[str, str]:
    """`teacher_data`, then SFT of `model_path` on it: (dataset dir, SFT model
    dir). The RL stage (and benchmarks/algorithms.py) start from that model."""
    dataset = teacher_data(cfg, recipe, model_path)
    return dataset, sft(sft_stage(cfg, recipe, model_path, dataset))


def rl_agent(recipe: Recipe) -> AgentConfig:
    """The recipe's agent, sampling at the recipe's RL temperature."""
    return recipe.agent.model_copy(update={"sampling": recipe.agent.sampling.model_copy(
        update={"temperature": recipe.rl_temperature})})


def sft_trainer(cfg: DemoConfig, recipe: Recipe, steps: int) -> TrainerConfig:
    return SFT_TRAINER.model_copy(update={"lr": cfg.sft_lr, "total_steps": steps, "seed": cfg.seed,
                                          "max_seq_len": recipe.max_seq_len})


def rl_trainer(cfg: DemoConfig, recipe: Recipe) -> TrainerConfig:
    return RL_TRAINER.model_copy(update={"lr": cfg.rl_lr or recipe.rl_lr, "seed": cfg.seed,
                                         "max_seq_len": recipe.max_seq_len})


def rl_stage(cfg: DemoConfig, recipe: Recipe, sft_model: str) -> RLTrainConfig:
    """GRPO from the SFT model on the recipe's RL env (its training reward), with its algorithm, steps,
    lr and temperature."""
    algorithm = recipe.rl_algorithm
    if cfg.group_size is not None:
        if not isinstance(algorithm, GroupAlgorithmBase):
            raise ValueError(f"group_size {cfg.group_size}: the {recipe.name} recipe's RL algorithm "
                             f"{algorithm.type!r} plays no groups")
        algorithm = algorithm.model_copy(update={"group_size": cfg.group_size})
    steps = cfg.rl_steps or recipe.rl_steps
    return RLTrainConfig(
        model_path=sft_model, out_dir=cfg.stage_dir("rl"), env=recipe.rl_env, agent=rl_agent(recipe),
        algorithm=algorithm, steps=steps, requests_per_step=recipe.rl_requests_per_step, branch=recipe.rl_branch,
        trainer=rl_trainer(cfg, recipe),
        steps_per_stage=max(steps // 2, 1), eval_episodes=0, launcher=cfg.launcher,
        progress_bar=cfg.progress_bar)


@flow(name="demo")
def demo(cfg: DemoConfig) -> dict:
    recipe = get_recipe(cfg.recipe)
    check_teacher(cfg, recipe)
    check_run_dir(cfg, recipe)
    model_path = build_model(cfg.model_dir, cfg.preset, cfg.seed)
    t = time.perf_counter()
    rows = [_row("teacher", recipe, _evaluate_teacher(recipe, cfg), time.perf_counter() - t)]
    t = time.perf_counter()
    rows.append(_row("before SFT", recipe, _evaluate(model_path, recipe, cfg), time.perf_counter() - t))
    t = time.perf_counter()
    dataset, sft_model = teacher_to_sft(cfg, recipe, model_path)
    rows.append(_row("after SFT", recipe, _evaluate(sft_model, recipe, cfg), time.perf_counter() - t))
    t = time.perf_counter()
    rl_model = rl_train(rl_stage(cfg, recipe, sft_model))
    rows.append(_row("after RL", recipe, _evaluate(rl_model, recipe, cfg), time.perf_counter() - t))
    table_artifact("demo-results", rows,
                   f"{recipe.name}: {cfg.eval_episodes or recipe.eval_episodes} greedy episodes per evaluation; "
                   "seconds = the stage and its evaluation")
    lineage = {"model": model_path, "rejection sampling dataset": dataset, "SFT model": sft_model,
               "RL model": rl_model}
    lineage_artifact("demo-lineage", lineage)
    return {"rows": rows, "lineage": lineage, "recipe": recipe.name,
            "eval_episodes": cfg.eval_episodes or recipe.eval_episodes}
