"""The controller queues the Celery tasks by name (it never imports ``portal.tasks``): every
name it sends is a task the worker has."""

from __future__ import annotations

from portal import tasks
from portal.celery import app
from portal.controller import enqueue, resync


def test_every_task_the_controller_queues_by_name_is_registered() -> None:
    sent = {
        enqueue.RECONCILE,
        resync.SITES_SYNC,
        resync.BINDINGS_RESYNC,
        resync.STEP_WORKFLOWS_CLEANUP,
    }
    assert sent <= set(app.tasks)
    assert tasks.run_advance.name == enqueue.RECONCILE
