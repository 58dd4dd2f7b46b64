"""The run page: events, outputs, clickable nodes, the legend, group nodes and unit filters."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from portal.choices import UnitPhase
from portal.models import RunEvent, UnitRun, WorkflowRun
from tests.factories import UnitRunFactory
from tests.portal.helpers import make_run
from tests.portal.units.conftest import HX

pytestmark = pytest.mark.django_db


def test_the_run_page_shows_outputs_events_and_clickable_nodes(
    run: WorkflowRun, client_for: Any, scientist: User, api_client_for: Any
) -> None:
    RunEvent.objects.create(run=run, kind="failover-blocked", message="no other site for x")
    body = client_for(scientist).get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    assert 'id="run-outputs"' in body and "best-score" in body and "0.93" in body
    assert 'id="run-events"' in body and "no other site for x" in body
    assert f'href="/runs/{run.pk}/units/inference/"' in body
    assert 'id="unit-panel-slot"' in body
    data = api_client_for(scientist).get(f"/api/v1/runs/{run.pk}/").json()
    assert data["outputs"]["parameters"] == [{"name": "best-score", "value": "0.93"}]
    assert data["outputs"]["final"][0]["unit"] == "inference"


def test_the_legend_has_an_entry_for_every_phase_drawn(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = make_run(
        scientist,
        units=[
            ("a", "site-a", UnitPhase.FAILED, []),
            ("b", "site-a", UnitPhase.OMITTED, ["a"]),
            ("c", "site-a", UnitPhase.ERROR, []),
        ],
    )
    body = client_for(scientist).get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    legend = re.search(r'<ul class="legend".*?</ul>', body, re.S)
    assert legend is not None
    for phase in ("Failed", "Omitted", "Error"):
        assert f"outline phase-{phase}" in legend.group(0)


def _fan_out(owner: User, items: int) -> WorkflowRun:
    run = make_run(owner, units=[("prepare", "site-a", UnitPhase.SUCCEEDED, [])])
    rows = [
        UnitRunFactory.build(
            run=run,
            name=f"process({i}:{i})",
            slug=f"process-{i}",
            position=i + 1,
            upstream=["prepare"],
            planned_site="site-b" if i % 3 else "site-c",
            phase=UnitPhase.SUCCEEDED if i % 5 else UnitPhase.RUNNING,
            spec={"task": "process", "item_index": i},
        )
        for i in range(items)
    ]
    rows.append(
        UnitRunFactory.build(
            run=run,
            name="report",
            position=items + 1,
            upstream=[r.name for r in rows],
            planned_site="site-a",
        )
    )
    UnitRun.objects.bulk_create(rows)
    return run


def test_a_big_fan_out_is_one_group_node_with_counts_and_expands(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = _fan_out(scientist, 500)
    client = client_for(scientist)
    body = client.get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    svg = re.search(r"<svg class=\"dag.*?</svg>", body, re.S)
    assert svg is not None
    assert svg.group(0).count('class="node ') < 50
    assert 'data-items="500"' in svg.group(0)
    assert "site-b 333" in body and "site-c 167" in body  # per-site counts
    assert "Running 100" in body and "Succeeded 400" in body  # per-phase counts
    expanded = client.get(
        reverse("ui-run-live", args=[run.pk]) + "?expand=process", **HX
    ).content.decode()
    svg = re.search(r"<svg class=\"dag.*?</svg>", expanded, re.S)
    assert svg is not None and svg.group(0).count('class="node ') == 502


def test_the_units_table_filters_by_phase_and_site_and_pages(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = _fan_out(scientist, 120)
    client = client_for(scientist)
    live = reverse("ui-run-live", args=[run.pk])
    body = client.get(f"{live}?phase=Running&site=site-c", **HX).content.decode()
    rows = re.findall(r'<a class="unit-name"[^>]*>([^<]+)</a>', body)
    assert rows and all(name.startswith("process(") for name in rows)
    assert len(rows) == len({i for i in range(120) if i % 5 == 0 and i % 3 == 0})
    page2 = client.get(f"{live}?site=site-b&page=2", **HX).content.decode()
    assert "Units 51\u201380 of 80" in page2
    assert "site=site-b&amp;page=1" in page2  # the pager keeps the filter


# --- resume ---------------------------------------------------------------------------------
