"""A training *stage*: resume from the last checkpoint, train to a target step,
end in a checkpoint. The unit a pipeline retries.

The spec (`spec.StageSpec`) is plain JSON, so the same stage runs
in-process or as `torchrun ... -m ludic_core.stages.run SPEC.json`
(`launch.run_torchrun`) with identical results; a retry after a crash (even
SIGKILL) resumes from the last checkpoint instead of step 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ludic_core.lifetime import die_with_parent
from ludic_core.publish.base import PolicyPublisher
from ludic_core.stages.data import batch_source, inference, needs_inference, publisher_only
from ludic_core.stages.spec import DatasetData, RolloutData, StageSpec, StreamData

__all__ = ["DatasetData", "RolloutData", "StreamData", "StageSpec", "run_stage", "main"]


def _loggers(spec: StageSpec, is_main: bool, extra: list | None) -> list:
    """The caller's loggers, plus the spec's (JSONL metrics, progress bar, wandb) on rank 0."""
    from ludic_core.logging import ConsoleLogger, JsonlLogger, WandbLogger

    out = list(extra or [])
    if not is_main:
        return out
    if spec.metrics_path:
        out.append(JsonlLogger(spec.metrics_path))
    if spec.progress_bar:
        out.append(ConsoleLogger(spec.until_step, ("loss", "reward_mean"), spec.title))
    if spec.wandb is not None and spec.wandb.mode != "disabled":
        out.append(WandbLogger(spec.wandb.project, mode=spec.wandb.mode, run_name=spec.wandb.run_name,
                               directory=spec.wandb.directory,
                               config={"until_step": spec.until_step, "algorithm": spec.algorithm.type}))
    return out


def run_stage(spec: StageSpec, *, loggers: list | None = None) -> dict[str, Any]:
    """Resume (if a checkpoint exists), train to `until_step`, checkpoint; return a summary."""
    from ludic_core.algorithms import build_algorithm
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.training.checkpoint import latest_checkpoint, verified_checkpoint
    from ludic_core.training.distributed import init_distributed
    from ludic_core.training.trainer import Trainer

    ctx = init_distributed(spec.trainer.device)
    # The newest intact checkpoint (a corrupt one is named and passed over; none intact: CheckpointCorrupt).
    latest = verified_checkpoint(spec.checkpoint_dir)
    # Rollouts are generated from the newest weights: the latest checkpoint's, else the initial model.
    # In-process LoRA serves the base and gets the (resumed) adapter pushed, as every later step's.
    lora_in_process = spec.trainer.lora is not None and spec.vllm is None
    serve_from = str(latest / "model") if latest and not lora_in_process else spec.model_path
    model, tok = load_model_and_tokenizer(spec.model_path)
    algorithm = build_algorithm(spec.algorithm)
    client: Any = None
    publisher: PolicyPublisher | None = None
    if needs_inference(spec):
        client, publisher = inference(spec, serve_from)
    else:
        publisher = publisher_only(spec)
    all_loggers = _loggers(spec, ctx.is_main, loggers)
    teacher: Any = None
    try:
        if isinstance(spec.data, StreamData) and ctx.world_size > 1:
            from ludic_core.training.broadcast import BroadcastSource  # one reader: rank 0 (torch: deferred)

            source: Any = BroadcastSource(batch_source(spec, algorithm, tok, client) if ctx.is_main else None, ctx)
        else:
            source = batch_source(spec, algorithm, tok, client)
        teacher_spec = spec.algorithm.teacher_spec()
        if teacher_spec is not None:
            from ludic_core.training.teacher import build_teacher

            teacher = build_teacher(teacher_spec, tok, device=ctx.device, chunk_tokens=spec.trainer.logprob_chunk_tokens,
                                    student_rows=model.get_output_embeddings().weight.shape[0])
        trainer = Trainer(model, algorithm, source, spec.trainer, tokenizer=tok, publisher=publisher,
                          loggers=all_loggers, checkpoint_dir=spec.checkpoint_dir, ctx=ctx, teacher=teacher)
        if hasattr(source, "trainer_version"):  # a stream source drops items by the trainer's version
            source.trainer_version = lambda: trainer.policy_version
        try:
            resumed_from = trainer.step if latest is not None and trainer.resume(latest) else None
            if publisher is not None and (spec.vllm is not None or not needs_inference(spec) or lora_in_process):
                trainer.publish()  # the server or the actors may hold other weights (fresh, restarted, ahead)
            history = trainer.train(spec.until_step)
            path = latest_checkpoint(spec.checkpoint_dir)
            if path is None or int(path.name.split("_")[-1]) != trainer.step:
                path = trainer.save_checkpoint()
        finally:
            trainer.close()
    finally:
        # a failed stage must not leak the weight-transfer group into the retry
        if publisher is not None:
            publisher.close()
        if hasattr(teacher, "close"):  # a server teacher's connections
            teacher.close()
    last = history[-1] if history else {}
    return {"checkpoint": str(path), "model_path": str(path / "model"), "step": trainer.step,
            "resumed_from": resumed_from, "steps_run": len(history), "world_size": ctx.world_size,
            "metrics": {k: float(v) for k, v in last.items()}}


def main(argv: list[str] | None = None) -> int:
    """`python -m ludic_core.stages.run SPEC.json [RESULT.json]` (also under torchrun)."""
    from ludic_core.training.checkpoint_integrity import CORRUPT_MARKER, CheckpointCorrupt
    from ludic_core.training.distributed import cleanup, init_distributed

    args = list(sys.argv[1:] if argv is None else argv)
    if "LOCAL_RANK" in os.environ:
        # torch's elastic agent starts ranks in sessions of their own: without this a
        # SIGKILLed agent (or flow run) leaves them training on beside the retry
        die_with_parent(signal.SIGKILL)
    if not args:
        print("usage: python -m ludic_core.stages.run SPEC.json [RESULT.json]", file=sys.stderr)
        return 2
    spec = StageSpec.model_validate_json(Path(args[0]).read_text())
    try:
        result = run_stage(spec)
    except CheckpointCorrupt as exc:  # the launcher reads this line: not a crash a retry would cure
        print(CORRUPT_MARKER + json.dumps(str(exc)), flush=True)
        raise
    ctx = init_distributed()
    if ctx.local_rank == 0 and len(args) > 1:  # one result per node: each node's launcher reads its own
        Path(args[1]).write_text(json.dumps(result))
    print(json.dumps({k: result[k] for k in ("checkpoint", "step", "resumed_from", "steps_run")}), flush=True)
    cleanup(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
