"""The step panel: site, workflow, inputs, outputs, decision, log, what a unit waits for and
its attempts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from portal.choices import UnitPhase
from portal.karmada import logs, proxy
from portal.models import UnitRun, WorkflowRun
from tests.factories import PlacementDecisionFactory, UnitRunFactory
from tests.portal.helpers import make_run
from tests.portal.units.conftest import HX, failed_over, panel_url

pytestmark = pytest.mark.django_db

# --- pod names ------------------------------------------------------------------------------


# --- the step panel -------------------------------------------------------------------------


def test_the_panel_shows_site_workflow_inputs_outputs_and_decision(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    unit = run.units.get(name="inference")
    PlacementDecisionFactory(unit=unit, site="site-c", reason="needs GPUs: site-c has 6 free")
    body = client_for(scientist).get(panel_url(run, "inference"), **HX).content.decode()
    assert 'id="unit-panel"' in body and "<html" not in body
    assert "site-c" in body and unit.workflow_name in body
    assert "unet" in body  # an input parameter
    assert "0.93" in body and "s3://results/eo/out.zarr" in body and "done" in body
    assert "needs GPUs: site-c has 6 free" in body
    assert reverse("ui-unit-logs", args=[run.pk, unit.slug]) in body


def test_a_step_whose_only_output_is_its_result_does_not_also_say_none(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    UnitRun.objects.filter(run=run, name="inference").update(outputs={"result": "42 tiles"})
    body = client_for(scientist).get(panel_url(run, "inference"), **HX).content.decode()
    outputs = body.split("Outputs", 1)[1].split("Placement", 1)[0]
    assert "42 tiles" in outputs and "None" not in outputs


def test_a_deep_link_opens_the_run_page_with_the_panel(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    body = client_for(scientist).get(panel_url(run, "inference")).content.decode()
    assert "<html" in body and 'id="unit-panel"' in body and 'id="run-live"' in body


def test_a_member_sees_the_panel_and_an_outsider_gets_404(
    run: WorkflowRun, client_for: Any, member: User, outsider: User
) -> None:
    assert client_for(member).get(panel_url(run, "inference"), **HX).status_code == 200
    assert client_for(outsider).get(panel_url(run, "inference"), **HX).status_code == 404
    logs_url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    assert client_for(outsider).get(logs_url, **HX).status_code == 404


def test_an_unknown_unit_is_404(run: WorkflowRun, client_for: Any, scientist: User) -> None:
    assert client_for(scientist).get(panel_url(run, "nope"), **HX).status_code == 404


def test_the_panel_reads_the_log_through_the_cluster_proxy(
    run: WorkflowRun, client_for: Any, scientist: User, fake_site: list[dict[str, Any]]
) -> None:
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "inference on 4 GPUs" in body
    wf = f"{run.name}-inference-1"
    assert fake_site[0]["site"] == "site-c"
    assert fake_site[0]["pod"] == f"{wf}-infer-{logs.fnv32a(f'{wf}[0].run')}"
    assert fake_site[0]["container"] == "main"
    assert 'data-live="false"' in body  # a finished step is not polled


def test_a_log_of_blank_lines_says_it_is_empty(
    run: WorkflowRun,
    client_for: Any,
    scientist: User,
    fake_site: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A step that printed only a newline drew an empty black box on the panel.
    monkeypatch.setattr(proxy, "pod_log", lambda *a, **k: iter([b"\n", b"  \n"]))
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "The log is empty." in body and "log-text" not in body


def test_a_unit_not_started_has_no_log_yet(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    UnitRun.objects.filter(run=run, name="inference").update(
        workflow_name="", phase=UnitPhase.PENDING
    )
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "no step workflow yet" in body


def test_a_waiting_unit_says_what_it_waits_for(
    sites: None, scientist: User, client_for: Any
) -> None:
    run = make_run(scientist)  # preprocess running, inference pending after it
    body = client_for(scientist).get(panel_url(run, "inference"), **HX).content.decode()
    assert "Waiting for preprocess to finish." in body


def _pending_ready(scientist: User) -> tuple[WorkflowRun, UnitRun]:
    run = make_run(
        scientist,
        units=[
            ("ingest", "site-a", UnitPhase.SUCCEEDED, []),
            ("preprocess", "site-b", UnitPhase.PENDING, ["ingest"]),
        ],
    )
    return run, run.units.get(name="preprocess")


def test_a_unit_waiting_for_a_lock_names_the_lock_not_its_creation(
    sites: None, scientist: User
) -> None:
    from portal.controller import gates
    from portal.selectors import unit_detail

    _run, unit = _pending_ready(scientist)
    # What the worker writes when the unit's mutex is held by another run.
    gates._say_waiting([unit], "waiting for the lock eo/Mutex/shared (spec.synchronization)")
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said == "Waiting for the lock eo/Mutex/shared (spec.synchronization)."


def test_a_unit_of_a_suspended_run_says_the_run_waits_to_be_resumed(
    sites: None, scientist: User
) -> None:
    from portal.selectors import unit_detail

    run, unit = _pending_ready(scientist)
    WorkflowRun.objects.filter(pk=run.pk).update(compiled={"spec": {"suspend": True}})
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said == "Waiting for the run to be resumed (spec.suspend)."


def test_a_unit_whose_pod_is_pending_at_its_site_names_the_members_reason(
    sites: None, scientist: User
) -> None:
    """A tainted or full site is named for what the member said, not blamed on "the site's
    capacity, or its image pulls"."""
    from portal.controller import bindings
    from portal.selectors import unit_detail

    _run, unit = _pending_ready(scientist)
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name="wf-preprocess-1", site="site-b")
    unit.refresh_from_db()
    reason = 'persistentvolumeclaim "scratch" not found'
    member = {
        "phase": "Running",
        "nodes": {
            "n": {"type": "Pod", "phase": "Pending", "displayName": "run", "message": reason}
        },
    }
    bindings._note_waiting(unit, "site-b", member, "7")  # what the watcher writes
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said == f"Waiting at site-b: run: {reason}."
    assert "capacity" not in said
    # With nothing reported, it blames nothing.
    UnitRun.objects.filter(pk=unit.pk).update(message="")
    said = unit_detail(UnitRun.objects.get(pk=unit.pk))["waiting_for"]
    assert said.startswith("Waiting for site-b to start") and "capacity" not in said


# --- attempts -------------------------------------------------------------------------------


def test_every_attempt_is_shown_and_the_failed_over_one_says_why(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    failed_over(run)
    client = client_for(scientist)
    body = client.get(panel_url(run, "preprocess"), **HX).content.decode()
    attempts = re.search(r'<ol class="attempts">(.*?)</ol>', body, re.S)
    assert attempts is not None
    assert "#1" in attempts.group(1) and "#2" in attempts.group(1)
    assert "failed over: site site-b not ready" in attempts.group(1)
    # The lost attempt's phase is the last one its site reported, and says so.
    assert re.search(r"#1.*last seen</span> <span class=\"phase", attempts.group(1), re.S)
    assert attempts.group(1).count("last seen") == 1  # not on the current attempt
    page = client.get(reverse("ui-run-detail", args=[run.pk])).content.decode()
    # The graph keeps the lost attempt as a greyed card, the timeline as a greyed bar.
    assert 'class="ghost"' in page and "attempt 1 at site-b: failed over" in page
    assert "bar phase-Succeeded ended" in page or "ended" in page


def test_the_panel_shows_inputs_resolved_from_upstream_outputs(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    UnitRun.objects.filter(run=run, name="ingest").update(
        outputs={
            "parameters": [{"name": "tile-count", "value": "42"}],
            "artifacts": [{"name": "tiles", "s3": {"bucket": "site-a-art", "key": "t.tgz"}}],
        }
    )
    UnitRun.objects.filter(run=run, name="preprocess").update(
        spec={
            "arguments": {
                "parameters": [
                    {
                        "name": "tile-count",
                        "value": "{{tasks.ingest.outputs.parameters.tile-count}}",
                    }
                ],
                "artifacts": [
                    {"name": "tiles", "from": "{{tasks.ingest.outputs.artifacts.tiles}}"}
                ],
            }
        }
    )
    body = client_for(scientist).get(panel_url(run, "preprocess"), **HX).content.decode()
    assert ">42</code>" in body and "s3://site-a-art/t.tgz" in body


def test_the_panel_shows_a_looped_producers_outputs_as_argos_list(
    run: WorkflowRun, client_for: Any, scientist: User
) -> None:
    # The panel fills inputs with the worker's own substitution: a looped producer's output
    # parameter is Argo's JSON list of the items' values in item order, not the raw reference.
    for index, value in ((1, "b"), (0, "a")):
        UnitRunFactory(
            run=run,
            name=f"tile({index})",
            phase="Succeeded",
            spec={"task": "tile", "item_index": index, "item": str(index)},
            outputs={"parameters": [{"name": "p", "value": value}]},
        )
    UnitRun.objects.filter(run=run, name="preprocess").update(
        upstream=["tile"],
        spec={
            "arguments": {
                "parameters": [{"name": "ps", "value": "{{tasks.tile.outputs.parameters.p}}"}]
            }
        },
    )
    body = client_for(scientist).get(panel_url(run, "preprocess"), **HX).content.decode()
    assert '<dt>ps</dt><dd><code class="value">[&quot;a&quot;,&quot;b&quot;]</code>' in body
