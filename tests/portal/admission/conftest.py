"""The webhook's settings and the demo run every admission test starts from."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import services
from portal.admission import decide
from portal.admission import queue as decision_queue
from portal.choices import UnitPhase
from portal.models import UnitRun, WorkflowRun
from tests.portal.admission.helpers import (
    EO_PIPELINE,
    GB,
    TOKEN,
    D,
)


@pytest.fixture(autouse=True)
def _webhook_settings(settings):
    settings.PORTAL_WEBHOOK_TOKEN = TOKEN
    settings.PORTAL_LABEL_DOMAIN = D
    settings.KARMADA_NAMESPACE = "portal"
    settings.PORTAL_WEBHOOK_BUDGET_MS = 500
    decide.snapshot_clear()
    assert decision_queue._queue() is not None, "these tests run with the queue (REDIS_URL)"
    yield
    decide.snapshot_clear()


@pytest.fixture
def demo_run(db, settings) -> WorkflowRun:
    # The demo loader sets passwords; the default hasher's cost is not what is tested here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("load_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    user = get_user_model().objects.get(username="scientist")
    run = services.run_submit(user=user, body=EO_PIPELINE.read_text())
    UnitRun.objects.filter(run=run, name="ingest").update(
        phase=UnitPhase.SUCCEEDED,
        site="site-a",
        outputs={
            "parameters": [{"name": "tile-count", "value": "12"}],
            "artifacts": [
                {"name": "tiles", "s3": {"key": "runs/ingest/tiles.tgz"}, "size": 20 * GB}
            ],
        },
    )
    return run
