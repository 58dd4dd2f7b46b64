"""The watcher on its own: with the periodic resync switched off (no Celery beat), what Karmada
changes in a ResourceBinding reaches the database only through the watcher. If the watcher
does not run, nothing here finishes."""

from __future__ import annotations

from django.contrib.auth.models import User

from portal import services
from portal.choices import RunStatus, UnitPhase
from portal.models import UnitRun, WorkflowRun
from tests.fixtures_stack import Stack, wait_for

ONE_STEP = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: watched-
spec:
  entrypoint: main
  templates:
    - name: main
      container:
        image: busybox
        command: [sh, -c, "echo watched"]
"""


def test_a_binding_change_reaches_the_database_through_the_watcher(
    live_without_resync: Stack,
) -> None:
    live = live_without_resync
    user = User.objects.get(username="scientist")  # load_demo's
    # What the worker did for the set-up (its inventory sync queues a resync) is not the test's.
    seen = len(live.log("worker", lines=100_000))
    run = services.run_submit(user=user, body=ONE_STEP, project="eo-demo")

    def succeeded() -> UnitRun | None:
        unit = UnitRun.objects.get(run=run)
        return unit if unit.phase == UnitPhase.SUCCEEDED else None

    try:
        # The member's phase is only in the binding's aggregatedStatus: Karmada reflects it
        # there and the watcher folds it into the unit.
        unit = wait_for(succeeded, 60, "the binding's Succeeded to reach the unit")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- watcher\n{live.log('watcher')}\n--- worker\n{live.log('worker')}"
        ) from None
    assert unit.site in {"site-a", "site-b", "site-c"}
    assert unit.started_at is not None and unit.finished_at is not None
    finished = wait_for(
        lambda: WorkflowRun.objects.filter(pk=run.pk, status=RunStatus.SUCCEEDED).first(),
        30,
        "the run to succeed",
    )
    assert finished.finished_at is not None
    # No resync ran behind the watcher's back: the worker never received one (its banner lists
    # the task names, hence the bracket of a received task's id).
    worker_log = live.log("worker", lines=100_000)[seen:]
    assert "Task portal.tasks.resync[" not in worker_log
    assert "Task portal.tasks.bindings_resync[" not in worker_log
