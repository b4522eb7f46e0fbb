"""A training *stage*: resume from the last checkpoint, train to a target step,
end in a checkpoint. The unit a pipeline retries.

A `StageSpec` is plain JSON (torch-free pydantic), so the same stage runs
in-process or as `torchrun ... -m ludic_core.training.stage SPEC.json` with
identical results; a retry after a crash (even SIGKILL) resumes from the
last checkpoint instead of step 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from ludic_core.config import AlgorithmConfig, LocalInferenceConfig, TrainerConfig

__all__ = ["DatasetData", "TicTacToeRLData", "VLLMEndpoint", "StageSpec", "run_stage", "main"]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DatasetData(_Spec):
    """SAW items from a dataset written by rejection sampling (token ids inside)."""

    kind: Literal["dataset"] = "dataset"
    path: str
    batch_size: int = Field(64, ge=1)


class TicTacToeRLData(_Spec):
    """Fresh tic-tac-toe rollouts from the current policy every step."""

    kind: Literal["tic_tac_toe_rl"] = "tic_tac_toe_rl"
    requests_per_step: int = Field(8, ge=1)
    group_size: int = Field(8, ge=1)
    opponent: Literal["random", "minimax"] = "random"
    temperature: float = Field(1.0, ge=0.0)
    seed: int = 1_000


DataSpec = Annotated[Union[DatasetData, TicTacToeRLData], Field(discriminator="kind")]


class VLLMEndpoint(_Spec):
    """Roll out through a running vLLM server and publish weights into it.

    The API key is read from the environment variable `api_key_env`, so it is
    never written into a spec file (torchrun stages read specs from disk).
    """

    base_url: str = Field(description="the server's OpenAI API root, e.g. http://127.0.0.1:8000/v1")
    model: str = Field("policy", description="served model name")
    api_key_env: str = Field("LUDIC_VLLM_API_KEY", description="environment variable holding the API key")
    bucket_mb: int = Field(64, ge=1, description="weight-push bucket size")


class StageSpec(_Spec):
    model_path: str = Field(description="initial weights (HF dir); later stages resume from checkpoints")
    checkpoint_dir: str
    algorithm: AlgorithmConfig
    trainer: TrainerConfig = TrainerConfig()
    data: DataSpec
    until_step: int = Field(ge=1, description="train until the trainer's step counter reaches this")
    metrics_path: str | None = None
    progress_bar: bool = Field(False, description="a console progress bar (rank 0)")
    vllm: VLLMEndpoint | None = Field(None, description="None = in-process LocalChatClient")
    local: LocalInferenceConfig = Field(LocalInferenceConfig(), description="the in-process LocalChatClient")


def _source(spec: StageSpec, algorithm: Any, tokenizer: Any, client: Any) -> Any:
    from ludic_core.batching.sources import OfflineBatchSource, RolloutBatchSource

    data = spec.data
    if isinstance(data, DatasetData):
        from ludic_core.rejection import load_saw_items

        return OfflineBatchSource(load_saw_items(data.path), batch_size=data.batch_size, seed=spec.trainer.seed)
    from ludic_core.recipes.tic_tac_toe import tic_tac_toe_engine, tic_tac_toe_requests
    from ludic_core.rollout import GRPORequestStrategy

    return RolloutBatchSource(
        tic_tac_toe_engine(client),
        lambda i: tic_tac_toe_requests(data.requests_per_step, opponent=data.opponent,
                                       seed=data.seed + i * data.requests_per_step, temperature=data.temperature),
        algorithm, max_steps=9, strategy=GRPORequestStrategy(data.group_size, seed=data.seed),
        max_seq_len=spec.trainer.max_seq_len,
    )


def _inference(spec: StageSpec, serve_from: str) -> tuple[Any, Any]:
    """(client, publisher): in-process by default, else the vLLM server in `spec.vllm`."""
    if spec.vllm is None:
        from ludic_core.inference import LocalChatClient
        from ludic_core.publish import InProcessPublisher

        client = LocalChatClient(serve_from, **spec.local.model_dump())
        return client, InProcessPublisher(client)
    import os

    from ludic_core.inference.vllm_client import VLLMChatClient
    from ludic_core.publish.vllm import VLLMPolicyPublisher

    key = os.environ.get(spec.vllm.api_key_env)
    vclient = VLLMChatClient(spec.vllm.base_url, model=spec.vllm.model, api_key=key)
    return vclient, VLLMPolicyPublisher(vclient.root_url, api_key=key, bucket_mb=spec.vllm.bucket_mb,
                                        on_published=vclient.note_published)


def run_stage(spec: StageSpec, *, loggers: list | None = None) -> dict[str, Any]:
    """Resume (if a checkpoint exists), train to `until_step`, checkpoint; return a summary."""
    from ludic_core.algorithms import build_algorithm
    from ludic_core.logging import JsonlLogger
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.training.checkpoint import latest_checkpoint
    from ludic_core.training.distributed import init_distributed
    from ludic_core.training.trainer import Trainer

    ctx = init_distributed(spec.trainer.device)
    latest = latest_checkpoint(spec.checkpoint_dir)
    # Rollouts are generated from the newest weights: the latest checkpoint's, else the initial model.
    serve_from = str(latest / "model") if latest else spec.model_path
    model, tok = load_model_and_tokenizer(spec.model_path)
    algorithm = build_algorithm(spec.algorithm)
    client = publisher = None
    if isinstance(spec.data, TicTacToeRLData):
        client, publisher = _inference(spec, serve_from)
    all_loggers = list(loggers or [])
    if spec.metrics_path and ctx.is_main:
        all_loggers.append(JsonlLogger(spec.metrics_path))
    if spec.progress_bar and ctx.is_main:
        from ludic_core.logging import ConsoleLogger

        all_loggers.append(ConsoleLogger(spec.until_step, ("loss", "reward_mean"), type(spec.algorithm).__name__))
    try:
        trainer = Trainer(model, algorithm, _source(spec, algorithm, tok, client), spec.trainer, tokenizer=tok,
                          publisher=publisher, loggers=all_loggers, checkpoint_dir=spec.checkpoint_dir, ctx=ctx)
        try:
            resumed_from = trainer.step if trainer.resume() else None
            if spec.vllm is not None and publisher is not None:
                trainer.publish()  # the server may hold other weights (fresh, restarted): serve the trainer's
            history = trainer.train(spec.until_step)
            path = latest_checkpoint(spec.checkpoint_dir)
            if path is None or int(path.name.split("_")[-1]) != trainer.step:
                path = trainer.save_checkpoint()
        finally:
            trainer.close()
    finally:
        # a failed stage must not leak the weight-transfer group into the retry
        if hasattr(publisher, "close"):
            publisher.close()
    last = history[-1] if history else {}
    return {"checkpoint": str(path), "model_path": str(path / "model"), "step": trainer.step,
            "resumed_from": resumed_from, "steps_run": len(history),
            "metrics": {k: float(v) for k, v in last.items()}}


def main(argv: list[str] | None = None) -> int:
    """`python -m ludic_core.training.stage SPEC.json [RESULT.json]` (also under torchrun)."""
    from ludic_core.training.distributed import cleanup, init_distributed

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m ludic_core.training.stage SPEC.json [RESULT.json]", file=sys.stderr)
        return 2
    spec = StageSpec.model_validate_json(Path(args[0]).read_text())
    result = run_stage(spec)
    ctx = init_distributed()
    if ctx.is_main and len(args) > 1:
        Path(args[1]).write_text(json.dumps(result))
    print(json.dumps({k: result[k] for k in ("checkpoint", "step", "resumed_from", "steps_run")}), flush=True)
    cleanup(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
