"""What the run page offers and says, checked on the page a scientist gets."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from portal.choices import RunStatus, UnitPhase
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db

UNITS = [
    ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
    ("train", "site-b", UnitPhase.FAILED, ["ingest"]),
]


def buttons(html: str) -> set[str]:
    return {
        label
        for label in ("Retry failed", "Resubmit", "Stop")
        if f'<button type="submit">{label}</button>' in html
        or f'<button type="submit" class="danger">{label}</button>' in html
    }


def test_a_stopped_run_offers_resubmit_not_retry_failed(
    client_for: Any, scientist: User, project: Any
) -> None:
    run = make_run(scientist, project=project, status=RunStatus.STOPPED, units=UNITS)
    html = client_for(scientist).get(f"/runs/{run.pk}/").content.decode()
    assert buttons(html) == {"Resubmit"}


def test_a_failed_run_offers_retry_failed_and_resubmit(
    client_for: Any, scientist: User, project: Any
) -> None:
    run = make_run(scientist, project=project, status=RunStatus.FAILED, units=UNITS)
    html = client_for(scientist).get(f"/runs/{run.pk}/").content.decode()
    assert buttons(html) == {"Retry failed", "Resubmit"}
