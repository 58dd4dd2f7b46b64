"""View tests of the dashboard: the runs list, the run page, submit and its preview, and the
permission boundaries."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from portal.choices import RunStatus, UnitPhase
from portal.models import WorkflowRun
from sites.models import Project
from tests.portal.helpers import EO_PIPELINE, chain_units, make_run
from tests.portal.views.conftest import BROKEN_YAML, HX

pytestmark = pytest.mark.django_db

# --------------------------------------------------------------------------------------------
# Anonymous users and the permission boundary


@pytest.mark.parametrize(
    "name,args",
    [
        ("home", []),
        ("ui-run-list", []),
        ("ui-submit", []),
        ("ui-fleet", []),
        ("ui-site-detail", ["site-a"]),
    ],
)
def test_it_redirects_anonymous_users_to_login(name: str, args: list[Any], demo_sites) -> None:
    response = Client().get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", ["ui-run-detail", "ui-run-live", "ui-run-decisions"])
def test_it_redirects_anonymous_users_from_run_pages(name: str, run: WorkflowRun) -> None:
    response = Client().get(reverse(name, args=[run.pk]))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", ["ui-run-detail", "ui-run-live", "ui-run-decisions"])
def test_it_hides_someone_elses_run_from_an_outsider(
    name: str, run: WorkflowRun, outsider: User, client_for
) -> None:
    assert client_for(outsider).get(reverse(name, args=[run.pk])).status_code == 404


@pytest.mark.parametrize("action", ["ui-run-stop", "ui-run-retry", "ui-run-resubmit"])
def test_an_outsider_cannot_act_on_someone_elses_run(
    action: str, run: WorkflowRun, outsider: User, client_for
) -> None:
    response = client_for(outsider).post(reverse(action, args=[run.pk]))
    assert response.status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert WorkflowRun.objects.count() == 1


def test_a_project_member_and_staff_see_the_run(
    run: WorkflowRun, member: User, staff: User, client_for
) -> None:
    assert client_for(member).get(reverse("ui-run-detail", args=[run.pk])).status_code == 200
    assert client_for(staff).get(reverse("ui-run-detail", args=[run.pk])).status_code == 200


def test_actions_need_post(sci: Client, run: WorkflowRun) -> None:
    assert sci.get(reverse("ui-run-stop", args=[run.pk])).status_code == 405


# --------------------------------------------------------------------------------------------
# Runs list


def test_the_runs_list_shows_only_visible_runs_with_progress(
    sci: Client, run: WorkflowRun, outsider: User
) -> None:
    hidden = make_run(outsider, name="not-yours")
    response = sci.get(reverse("ui-run-list"))
    body = response.content.decode()
    assert response.status_code == 200
    assert run.name in body
    assert hidden.name not in body
    assert "1/3" in body  # one unit of three done
    assert 'hx-trigger="every 3s"' in body  # a running run: the table polls


def test_the_runs_list_stops_polling_when_every_run_is_finished(sci: Client, scientist) -> None:
    make_run(scientist, status=RunStatus.SUCCEEDED)
    body = sci.get(reverse("ui-run-list")).content.decode()
    assert "hx-trigger" not in body.split('id="run-table"')[1].split(">")[0]


def test_the_runs_partial_is_the_table_only(sci: Client, run: WorkflowRun) -> None:
    body = sci.get(reverse("ui-run-list"), **HX).content.decode()
    assert body.lstrip().startswith('<div id="run-table"')
    assert "<html" not in body
    assert run.name in body


def test_the_runs_list_filters_by_status_site_and_project(
    sci: Client, scientist: User, project: Project, demo_sites
) -> None:
    running = make_run(scientist, project=project, name="running-run")
    done = make_run(
        scientist,
        status=RunStatus.SUCCEEDED,
        units=[("only", "site-c", UnitPhase.SUCCEEDED, [])],
        name="done-run",
    )

    def names(**query: str) -> set[str]:
        body = sci.get(reverse("ui-run-list"), query, **HX).content.decode()
        return set(re.findall(r">((?:running|done)-run)<", body))

    assert names() == {"running-run", "done-run"}
    assert names(status="Succeeded") == {done.name}
    assert names(site="site-a") == {running.name}  # only the running run has a unit there
    assert names(project="eo") == {running.name}
    assert names(status="Bogus") == {"running-run", "done-run"}  # an invalid filter is ignored


# --------------------------------------------------------------------------------------------
# Run page and its partials


def test_the_run_page_shows_dag_timeline_units_and_decisions(sci: Client, run: WorkflowRun):
    response = sci.get(reverse("ui-run-detail", args=[run.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert body.count('class="node ') == 3
    # inference is pending but was placed at submission: it shows its planned site's colour
    assert set(re.findall(r'data-site="([^"]*)"', body)) == {"site-a", "site-b", "site-c"}
    fills = set(re.findall(r'<rect x="\d+" y="\d+" width="150" [^>]*fill="(#\w+)"', body))
    assert len(fills) == 3
    assert 'class="timeline"' in body
    assert body.count('<details class="decision">') == 3
    assert "cordoned" in body  # why site-z was not chosen
    assert 'hx-trigger="every 2s"' in body  # not finished: polls
    for action in ("ui-run-stop", "ui-run-resubmit"):
        assert reverse(action, args=[run.pk]) in body
    assert "csrfmiddlewaretoken" in body


def test_the_live_partial_polls_until_the_run_is_finished(sci: Client, run: WorkflowRun) -> None:
    url = reverse("ui-run-live", args=[run.pk])
    body = sci.get(url, **HX).content.decode()
    assert body.lstrip().startswith('<div id="run-live"')
    assert 'hx-trigger="every 2s"' in body
    assert reverse("ui-run-stop", args=[run.pk]) in body
    run.status = RunStatus.SUCCEEDED
    run.save()
    run.units.update(phase=UnitPhase.SUCCEEDED, site="site-c")
    body = sci.get(url, **HX).content.decode()
    assert "hx-trigger" not in body.split(">")[0]
    assert 'data-finished="true"' in body
    assert "3 of 3 units done" in body
    assert reverse("ui-run-stop", args=[run.pk]) not in body  # the actions follow the status


def test_the_live_partial_signals_new_decisions(sci: Client, run: WorkflowRun) -> None:
    # The poll carries the newest decision the page shows (its id).
    url = reverse("ui-run-live", args=[run.pk])
    newest = run.decisions.order_by("-id")[0].pk
    assert "HX-Trigger" not in sci.get(url, {"decisions": str(newest)}, **HX)
    assert sci.get(url, {"decisions": str(newest - 1)}, **HX)["HX-Trigger"] == "decisions-changed"


def test_the_decisions_partial_lists_candidates(sci: Client, run: WorkflowRun) -> None:
    body = sci.get(reverse("ui-run-decisions", args=[run.pk]), **HX).content.decode()
    assert body.lstrip().startswith('<section class="card" id="decisions"')
    assert body.count("(chosen)") == 3
    assert "5.0 GiB" in body and "42 s" in body


def test_the_units_table_is_paginated_for_large_runs(sci: Client, scientist, demo_sites) -> None:
    big = make_run(scientist, units=chain_units(120), decisions=False)
    body = sci.get(reverse("ui-run-detail", args=[big.pk])).content.decode()
    assert body.count('class="unit-name"') == 50
    assert "Units 1\u201350 of 120" in body
    assert 'class="dag compact"' not in body  # 120 nodes still get labels
    page3 = sci.get(reverse("ui-run-live", args=[big.pk]), {"page": 3}, **HX).content.decode()
    assert page3.count('class="unit-name"') == 20
    assert "?page=3" in page3.split(">")[0]  # polling keeps the page


def test_a_very_large_dag_is_drawn_compact(sci: Client, scientist, demo_sites) -> None:
    big = make_run(scientist, units=chain_units(400), decisions=False)
    body = sci.get(reverse("ui-run-live", args=[big.pk]), **HX).content.decode()
    assert 'class="dag compact"' in body
    assert body.count('class="node ') == 400
    assert "<text x=" not in body.split('class="dag compact"')[1].split("</svg>")[0]
    assert 'hx-trigger="every 6s"' in body


def test_stop_goes_through_the_service(sci: Client, run: WorkflowRun, monkeypatch) -> None:
    calls: list[tuple[WorkflowRun, User]] = []
    monkeypatch.setattr(
        "portal.services.run_stop", lambda *, run, user: calls.append((run, user)) or run
    )
    response = sci.post(reverse("ui-run-stop", args=[run.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("ui-run-detail", args=[run.pk])
    assert [(r.pk, u.username) for r, u in calls] == [(run.pk, "scientist")]


def test_a_refused_action_is_shown_not_a_500(sci: Client, scientist, demo_sites) -> None:
    done = make_run(scientist, status=RunStatus.SUCCEEDED)
    response = sci.post(reverse("ui-run-stop", args=[done.pk]), follow=True)
    assert response.status_code == 200
    assert "Could not stop the run" in response.content.decode()


def test_resubmit_opens_the_new_run(sci: Client, run: WorkflowRun, monkeypatch) -> None:
    new = make_run(run.owner, name="the-new-one")
    monkeypatch.setattr("portal.services.run_resubmit", lambda *, run, user: new)
    response = sci.post(reverse("ui-run-resubmit", args=[run.pk]))
    assert response["Location"] == reverse("ui-run-detail", args=[new.pk])


# --------------------------------------------------------------------------------------------
# Submit


def test_the_submit_page_has_the_form(sci: Client) -> None:
    body = sci.get(reverse("ui-submit")).content.decode()
    assert 'name="manifest"' in body and 'name="upload"' in body
    assert reverse("ui-submit-preview") in body and reverse("ui-submit-parameters") in body


def test_the_parameter_form_follows_the_yaml(sci: Client) -> None:
    response = sci.post(
        reverse("ui-submit-parameters"), {"manifest": EO_PIPELINE.read_text()}, **HX
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<fieldset id="params"')
    assert '<select name="param-model"' in body
    assert "cloud-segmentation-v3" in body and "land-cover-v2" in body
    assert 'name="param-scene-uri"' in body
    assert "Model the inference step runs" in body  # description as help text
    empty = sci.post(reverse("ui-submit-parameters"), {"manifest": BROKEN_YAML}, **HX)
    assert "declares no" in empty.content.decode()


def test_an_upload_fills_the_text_area(sci: Client) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("wf.yaml", EO_PIPELINE.read_bytes(), "application/yaml")
    body = sci.post(reverse("ui-submit-parameters"), {"upload": upload}, **HX).content.decode()
    assert 'hx-swap-oob="true"' in body and "generateName: eo-pipeline-" in body
    assert 'name="param-model"' in body


def test_the_preview_shows_the_plan_with_sites(sci: Client, monkeypatch) -> None:
    plan = {
        "units": [
            {
                "name": "ingest",
                "template": "ingest",
                "depends": "",
                "timing": "submit",
                "site": "site-a",
                "reason": "data is at site-a",
                "candidates": [
                    {
                        "site": "site-a",
                        "eligible": True,
                        "why": "",
                        "score": 1,
                        "bytes_to_move": 0,
                        "est_transfer_s": 0,
                    }
                ],
            },
            {
                "name": "preprocess",
                "template": "preprocess",
                "depends": "ingest",
                "timing": "runtime",
                "site": None,
                "reason": "placed at runtime",
                "candidates": [
                    {"site": "site-b", "eligible": True, "why": "", "score": 0.8},
                    {"site": "site-a", "eligible": True, "why": "", "score": 0.2},
                ],
            },
        ]
    }
    seen: dict[str, Any] = {}

    def preview(**kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs)
        return plan

    monkeypatch.setattr("portal.services.workflow_preview", preview)
    data = {"manifest": EO_PIPELINE.read_text(), "param-model": "land-cover-v2"}
    body = sci.post(reverse("ui-submit-preview"), data, **HX).content.decode()
    assert body.lstrip().startswith('<section id="preview"')
    assert "Placement preview" in body
    assert set(re.findall(r'data-site="([^"]*)"', body)) == {"site-a", "site-b"}
    assert "likely; decided at runtime" in body
    assert seen["arguments"]["model"] == "land-cover-v2"
    assert seen["user"].username == "scientist"


def test_the_preview_puts_errors_next_to_their_lines(sci: Client) -> None:
    text = EO_PIPELINE.read_text().replace("template: preprocess", "template: no-such-template")
    response = sci.post(reverse("ui-submit-preview"), {"manifest": text}, **HX)
    body = response.content.decode()
    assert "problem" in body
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "no-such-template" in t)
    assert re.search(rf"Line {line}\b", body), body
    broken = sci.post(reverse("ui-submit-preview"), {"manifest": BROKEN_YAML}, **HX)
    assert 'class="line-no">Line 5' in broken.content.decode()
    assert '<span class="gutter">5</span>   templates: []' in broken.content.decode()


def test_an_empty_submission_is_refused_with_a_message(sci: Client) -> None:
    response = sci.post(reverse("ui-submit"), {"manifest": "  "})
    assert response.status_code == 400
    assert "Paste a workflow or upload a file." in response.content.decode()
    assert WorkflowRun.objects.count() == 0


def test_a_broken_workflow_is_not_submitted(sci: Client) -> None:
    response = sci.post(reverse("ui-submit"), {"manifest": BROKEN_YAML})
    assert response.status_code == 400
    assert "yaml-error" in response.content.decode()
    assert WorkflowRun.objects.count() == 0


def test_the_no_js_preview_renders_the_whole_page(sci: Client) -> None:
    response = sci.post(reverse("ui-submit"), {"manifest": BROKEN_YAML, "action": "preview"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "<html" in body and "yaml-error" in body


def test_submit_creates_the_run_and_opens_it(sci: Client, monkeypatch, scientist) -> None:
    made: dict[str, Any] = {}

    def run_submit(**kwargs: Any) -> WorkflowRun:
        made.update(kwargs)
        return make_run(kwargs["user"], name="submitted-run")

    monkeypatch.setattr("portal.services.run_submit", run_submit)
    data = {"manifest": EO_PIPELINE.read_text(), "project": "eo"}
    response = sci.post(reverse("ui-submit"), data)
    run = WorkflowRun.objects.get(name="submitted-run")
    assert response.status_code == 302
    assert response["Location"] == reverse("ui-run-detail", args=[run.pk])
    assert made["project"].name == "eo"
    assert made["arguments"]["model"] == "cloud-segmentation-v3"


def test_a_foreign_project_cannot_be_chosen(sci: Client) -> None:
    from tests.factories import ProjectFactory

    ProjectFactory(name="secret")
    response = sci.post(reverse("ui-submit"), {"manifest": "kind: Workflow", "project": "secret"})
    assert response.status_code == 400
    assert WorkflowRun.objects.count() == 0


def test_the_preview_shows_its_warnings_with_their_fields(sci: Client) -> None:
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "w-"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "steps": [
                        [{"name": "a", "template": "t"}],
                        [{"name": "b", "template": "t", "withParam": "{{steps.a.outputs.result}}"}],
                    ],
                },
                {"name": "t", "container": {"image": "alpine", "command": ["true"]}},
            ],
        },
    }
    text = yaml.safe_dump(doc)
    body = sci.post(reverse("ui-submit-preview"), {"manifest": text}, **HX).content.decode()
    assert 'class="warnings"' in body
    assert "spec.templates[0].steps[1][0].withParam" in body and "one row" in body
