"""`ludic zombies` on the real (embedded) Prefect API: the documented zombie-run
automation, created once and updated in place on a second call."""

import pytest

from flows.cli import main


def test_ludic_zombies_creates_the_automation_once(prefect_api, capsys):
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client

    from flows.zombies import AUTOMATION_NAME

    assert main(["zombies", "--within", "90"]) == 0
    assert "created automation" in capsys.readouterr().out
    first = Automation.read(name=AUTOMATION_NAME)
    trigger = first.trigger
    assert trigger.posture.value == "Proactive" and trigger.within.total_seconds() == 90
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    assert {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Crashed"} <= trigger.expect
    assert trigger.for_each == {"prefect.resource.id"}
    [action] = first.actions
    assert action.type == "change-flow-run-state" and action.state.value == "CRASHED"

    assert main(["zombies", "--within", "120"]) == 0  # again: the same automation, updated
    assert "updated automation" in capsys.readouterr().out
    with get_client(sync_client=True) as client:
        same = client.read_automations_by_name(AUTOMATION_NAME)
    assert len(same) == 1 and same[0].id == first.id and same[0].trigger.within.total_seconds() == 120


def test_a_window_shorter_than_a_heartbeat_is_refused(prefect_api):
    from flows.zombies import ensure_zombie_automation

    with pytest.raises(ValueError, match="within_s must be >= 30"):
        ensure_zombie_automation(10)
