"""Zombie runs: a flow run whose process died with its machine (or its worker's
whole process group) cannot report its own end, and would show `Running` for
ever. Deployment runs send a heartbeat event every
`PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds (180 by default); the automation
Prefect documents for this marks a run `Crashed` when no heartbeat (and no
final state) follows the last one within `within_s`. `ludic zombies` sets it
up, idempotently, on the server PREFECT_API_URL names.

A crashed rl_train / sft / pipeline run is then simply run again: its stages
resume from the last committed checkpoint.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["AUTOMATION_NAME", "default_within_s", "ensure_zombie_automation"]

AUTOMATION_NAME = "ludic: crash zombie flow runs"


def default_within_s() -> int:
    """Three heartbeat periods: one late heartbeat is not a death."""
    from prefect.settings import get_current_settings

    return 3 * int(get_current_settings().flows.heartbeat_frequency or 180)


def ensure_zombie_automation(within_s: int | None = None) -> tuple[str, int, bool]:
    """Create (or update) the automation; returns (its id, within_s, created)."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    within_s = within_s or default_within_s()
    if within_s < 30:
        raise ValueError(f"within_s must be >= 30 (heartbeats come at most every 30 s), got {within_s}")
    spec = dict(
        name=AUTOMATION_NAME,
        description="Marks a flow run Crashed when its heartbeats stop (its process died without a word).",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=within_s),
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message=f"no heartbeat for {within_s} s: the run's process is gone")],
    )
    try:
        existing = Automation.read(name=AUTOMATION_NAME)
    except ValueError:  # not there yet
        created = Automation(**spec).create()
        return str(created.id), within_s, True
    updated = Automation(id=existing.id, **spec)
    updated.update()
    return str(existing.id), within_s, False
