"""Chains: stages that start themselves on Prefect events (docs/chains.md).

The `chain-*` deployments in prefect.yaml carry the chain rejection_sampling -> sft ->
rl_train -> evaluate as deployment triggers: when a run of one stage's deployment reaches
`Completed`, Prefect's triggers service runs the next stage's deployment with parameters
rendered from that run (its `cfg.chain.id`, its id, its out_dir). Nothing here starts a
run: Prefect does. What a stage adds when its config names a chain (`cfg.chain`):

  * its out_dir must name the chain id (`runs/chains/ID/sft`), so two chains never
    write, or skip on, each other's outputs;
  * the run checks the run that triggered it (`chain.upstream_run`: it exists, it is
    Completed, it belongs to the same chain) and records the hop in a `chain-lineage`
    artifact: the lineage the UI shows;
  * a failure is re-raised naming the chain and the stage, so the failed run's state
    message says where the chain stopped. The next stage's trigger waits for a
    `Completed` event and never sees one: the chain stops there, by construction.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import PurePath
from typing import ClassVar, Iterator, Mapping
from uuid import UUID

from pydantic import Field, model_validator

from ludic_core.frozen import FrozenModel

__all__ = ["ChainLink", "ChainStage", "ChainStageFailed", "chain_stage"]


class ChainLink(FrozenModel):
    """Where a run sits in a chain of deployments."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                    description="the chain's id, chosen by whoever starts the chain: every stage's out_dir names it "
                                "(runs/chains/ID/STAGE), so two chains never cross")
    upstream_run: str | None = Field(
        None, pattern=r"^[0-9a-fA-F-]{36}$",
        description="id of the upstream stage's flow run whose completion triggered this run (the trigger sets it); "
                    "None = the chain's first stage")


class ChainStage(FrozenModel):
    """A flow config that can run as a stage of a chain (mixed into its config)."""

    #: the field naming the directory this stage writes (None: it writes none)
    chain_dir_field: ClassVar[str | None] = "out_dir"

    chain: ChainLink | None = Field(
        None, description="the chain this run is a stage of (docs/chains.md); None = a run on its own")

    @model_validator(mode="after")
    def _out_dir_names_the_chain(self) -> ChainStage:
        field = type(self).chain_dir_field
        if self.chain is None or field is None:
            return self
        path = getattr(self, field)
        if self.chain.id not in PurePath(path).parts:
            raise ValueError(f"{field}={path!r} does not name chain {self.chain.id!r}: a chain's stages write under "
                             f"a directory named after it (e.g. runs/chains/{self.chain.id}/STAGE), so two chains "
                             "never share outputs")
        return self


class ChainStageFailed(RuntimeError):
    """A stage of a chain failed: the stages after it get no run."""


@contextmanager
def chain_stage(cfg: ChainStage, stage: str, inputs: Mapping[str, str]) -> Iterator[None]:
    """Run a flow's body as stage `stage` of `cfg.chain` (nothing when it has none):
    check the upstream run, record the hop, and name the chain and the stage in a failure."""
    link = cfg.chain
    if link is None:
        yield
        return
    from prefect import get_run_logger

    log = get_run_logger()
    try:
        upstream = _upstream(link) if link.upstream_run else None
        log.info("chain %r: stage %s%s", link.id, stage,
                 f", triggered by {upstream['deployment']} run {upstream['name']!r} ({link.upstream_run})"
                 if upstream else " (the chain's first stage)")
        _lineage_artifact(link, stage, upstream, inputs)
        yield
    except Exception as exc:
        raise ChainStageFailed(
            f"chain {link.id!r} stopped at stage {stage}: {type(exc).__name__}: {exc} -- the stages after it get "
            "no run; fix the cause and re-run this stage (docs/chains.md)") from exc


def _upstream(link: ChainLink) -> dict[str, str]:
    """The upstream run, checked: it exists, it Completed, and it is a stage of the same chain."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            run = client.read_flow_run(UUID(link.upstream_run))
        except ObjectNotFound:
            raise ValueError(f"chain.upstream_run: no flow run {link.upstream_run}") from None
        deployment = client.read_deployment(run.deployment_id).name if run.deployment_id else "(no deployment)"
    state = run.state.type.value if run.state else "no state"
    if state != "COMPLETED":
        raise ValueError(f"chain.upstream_run: run {run.name!r} ({run.id}) is {state}, not COMPLETED")
    cfg = run.parameters.get("cfg") if isinstance(run.parameters, dict) else None
    theirs = (cfg.get("chain") or {}).get("id") if isinstance(cfg, dict) else None
    if theirs != link.id:
        raise ValueError(f"chain.upstream_run: run {run.name!r} ({run.id}) belongs to chain {theirs!r}, "
                         f"not {link.id!r}")
    return {"name": run.name, "deployment": deployment, "flow_run": str(run.id)}


def _lineage_artifact(link: ChainLink, stage: str, upstream: dict[str, str] | None,
                      inputs: Mapping[str, str]) -> None:
    from prefect.artifacts import create_markdown_artifact

    rows = [("chain", link.id), ("stage", stage)]
    if upstream:
        rows += [("triggered by", f"{upstream['deployment']} run {upstream['name']!r}"),
                 ("upstream flow run", upstream["flow_run"])]
    else:
        rows.append(("triggered by", "(the chain's first stage)"))
    rows += [(name, value) for name, value in inputs.items()]
    lines = ["| | |", "|---|---|"] + [f"| {k} | `{v}` |" for k, v in rows]
    create_markdown_artifact(key="chain-lineage", markdown="\n".join(lines),
                             description=f"chain {link.id}: stage {stage} and the run that triggered it")
