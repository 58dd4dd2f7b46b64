"""Rule revisions over REST and the command line: drafts, the 409 of two edits from one
parent, review, replay of the demo's past runs, apply, rollback, and the YAML file."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from placement.revisions.selectors import current_config
from portal import services
from tests.factories import UserFactory

PIPELINE = (Path(settings.BASE_DIR) / "examples" / "eo-pipeline.yaml").read_text()
URL = "/api/v1/rule-revisions/"


@pytest.fixture
def demo(db: Any) -> None:
    """The demo fleet, with GPUs at site-b too (not listed as a capability, so the demo's GPU
    rule keeps inference at site-c until a revision retargets it)."""
    from sites.models import Site

    call_command("load_demo", verbosity=0)
    Site.objects.filter(name="site-b").update(gpu_allocatable=4)


@pytest.fixture
def reviewers(demo: None, api_client_for: Any) -> tuple[Any, Any]:
    alice = UserFactory(username="alice", is_staff=True)
    bob = UserFactory(username="bob", is_staff=True)
    return api_client_for(alice), api_client_for(bob)


def _scientist() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="scientist")


def _past_runs(n: int = 2) -> list[Any]:
    return [services.run_submit(user=_scientist(), body=PIPELINE) for _ in range(n)]


def _gpu_retargeted() -> dict[str, Any]:
    config = copy.deepcopy(current_config())
    for rule in config["rules"]:
        if rule["name"] == "inference-on-gpu":
            rule["effect"] = "pin"
            rule["parameters"] = {"sites": ["site-b"]}
    return config


def _inference_site(run: Any) -> str:
    return run.units.get(name="inference").site


def test_a_draft_retargeting_the_gpu_rule_replays_the_inference_units_that_would_move(
    reviewers: tuple[Any, Any],
) -> None:
    runs = _past_runs(2)
    assert all(_inference_site(r) == "site-c" for r in runs)
    alice, _ = reviewers
    draft = alice.post(URL, {"config": _gpu_retargeted(), "comment": "GPUs off"}, format="json")
    assert draft.status_code == 201, draft.content
    body = draft.json()
    assert body["state"] == "draft" and body["author"] == "alice"
    changed = body["diff"]["rules"]["changed"][0]
    assert changed["name"] == "inference-on-gpu"
    assert changed["fields"]["effect"] == {"from": "require_capabilities", "to": "pin"}

    replay = alice.post(f"{URL}{body['id']}/replay/", {}, format="json")
    assert replay.status_code == 200
    moved = replay.json()["moved"]
    assert sorted(m["run"] for m in moved) == sorted(r.pk for r in runs)
    assert {(m["unit"], m["from"], m["to"]) for m in moved} == {("inference", "site-c", "site-b")}
    assert all("inference-on-gpu" in m["why"] for m in moved)
    summary = replay.json()["summary"]
    assert summary["moved_by_pair"] == {"site-c->site-b": 2}
    assert summary["residency_violations"] == []
    # Replay is deterministic: asked again, the same answer.
    assert alice.post(f"{URL}{body['id']}/replay/", {}, format="json").json() == replay.json()
    # Filtered by project, by time and bounded by a number of decisions.
    other = alice.post(f"{URL}{body['id']}/replay/", {"project": "elsewhere"}, format="json")
    assert other.json()["summary"]["decisions"] == 0
    later = alice.post(
        f"{URL}{body['id']}/replay/", {"since": "2999-01-01T00:00:00Z"}, format="json"
    )
    assert later.json()["moved"] == []
    one_run = alice.post(f"{URL}{body['id']}/replay/", {"limit": 3}, format="json").json()
    assert one_run["summary"]["runs"] == 1 and one_run["moved"][0]["run"] == runs[-1].pk
    bad = alice.post(f"{URL}{body['id']}/replay/", {"limit": 0}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "limit"


def test_applying_an_approved_draft_changes_the_next_runs_placement(
    reviewers: tuple[Any, Any],
) -> None:
    alice, bob = reviewers
    draft = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    not_yet = alice.post(f"{URL}{draft['id']}/apply/")
    assert not_yet.status_code == 400 and "approve" in str(not_yet.json())
    assert bob.post(f"{URL}{draft['id']}/approve/").status_code == 200
    applied = alice.post(f"{URL}{draft['id']}/apply/")
    assert applied.status_code == 200, applied.content
    assert applied.json()["state"] == "applied" and applied.json()["applied_by"] == "alice"
    assert _inference_site(_past_runs(1)[0]) == "site-b"
    listed = alice.get(URL).json()["results"]
    assert [r["state"] for r in listed[:2]] == ["applied", "superseded"]


def test_the_author_cannot_approve_their_own_draft(reviewers: tuple[Any, Any]) -> None:
    alice, _ = reviewers
    draft = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    response = alice.post(f"{URL}{draft['id']}/approve/")
    assert response.status_code == 403
    assert alice.get(f"{URL}{draft['id']}/").json()["state"] == "draft"


def test_two_edits_from_the_same_parent_the_second_gets_409_naming_the_first(
    reviewers: tuple[Any, Any],
) -> None:
    alice, bob = reviewers
    first = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    other = _gpu_retargeted()
    other["sites"][0]["cordoned"] = True
    second = bob.post(URL, {"config": other, "parent": first["parent"]}, format="json")
    assert second.status_code == 409
    assert second.json()["newer"] == first["id"]
    assert f"revision {first['id']}" in second.json()["detail"]


def test_a_bad_field_is_a_400_naming_its_path_and_stores_nothing(
    reviewers: tuple[Any, Any],
) -> None:
    alice, _ = reviewers
    config = _gpu_retargeted()
    config["rules"][1]["effect"] = "teleport"
    response = alice.post(URL, {"config": config}, format="json")
    assert response.status_code == 400
    paths = [e["path"] for e in response.json()["errors"]]
    assert paths == ["config.rules[1].effect"]
    assert len(alice.get(URL).json()["results"]) == 1  # the baseline alone


def test_a_scientist_reads_revisions_and_gets_403_on_every_write(
    reviewers: tuple[Any, Any], api_client_for: Any
) -> None:
    alice, _ = reviewers
    draft = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    scientist = api_client_for(_scientist())
    assert scientist.get(URL).status_code == 200
    assert scientist.get(f"{URL}{draft['id']}/").status_code == 200
    assert scientist.post(URL, {"config": _gpu_retargeted()}, format="json").status_code == 403
    for action in ("replay", "approve", "reject", "apply", "rollback"):
        assert scientist.post(f"{URL}{draft['id']}/{action}/").status_code == 403, action


def test_rollback_makes_a_new_revision_equal_to_the_earlier_one(
    reviewers: tuple[Any, Any], settings: Any
) -> None:
    settings.PORTAL_RULES_REVIEW = False
    alice, _ = reviewers
    before = current_config()
    draft = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    assert alice.post(f"{URL}{draft['id']}/apply/").status_code == 200
    assert current_config() != before
    back = alice.post(f"{URL}{draft['parent']}/rollback/", {}, format="json")
    assert back.status_code == 201
    assert back.json()["restores"] == draft["parent"] and back.json()["parent"] == draft["id"]
    assert alice.post(f"{URL}{back.json()['id']}/apply/").status_code == 200
    assert current_config() == before


def _rules(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("rules", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_export_then_dry_run_of_the_unchanged_file_prints_no_change(
    demo: None, tmp_path: Path
) -> None:
    _past_runs(1)
    text, _ = _rules("export")
    doc = yaml.safe_load(text)
    assert doc["schema"] == 1 and [r["name"] for r in doc["rules"]][-1] == "inference-on-gpu"
    assert _rules("export")[0] == text  # stable order
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    out, _ = _rules("apply", str(path), "--dry-run")
    assert "no change" in out.splitlines()
    assert "moved: 0 units" in out.splitlines()


def test_dry_run_of_a_changed_file_prints_the_diff_and_what_moves(
    demo: None, tmp_path: Path
) -> None:
    _past_runs(1)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(_gpu_retargeted(), sort_keys=False))
    out, _ = _rules("apply", str(path), "--dry-run")
    assert "~ rules: inference-on-gpu.effect: 'require_capabilities' -> 'pin'" in out
    assert "moved: 1 units" in out.splitlines()


def test_a_file_with_a_bad_field_exits_non_zero_naming_its_path(demo: None, tmp_path: Path) -> None:
    doc = _gpu_retargeted()
    doc["rules"][0]["wieght"] = 3
    doc["links"][0]["bandwidth_mbps"] = "fast"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(doc))
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("rules", "apply", str(path), "--dry-run", stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode != 0
    assert "rules[0].wieght: Unknown field" in err.getvalue()
    assert "links[0].bandwidth_mbps: Must be a number." in err.getvalue()


def test_a_file_loosening_residency_exits_non_zero(demo: None, tmp_path: Path) -> None:
    from sites.models import Dataset

    Dataset.objects.update(residency=["eu-central"])
    _past_runs(1)
    doc = current_config()
    for d in doc["datasets"]:
        d["residency"] = []
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CommandError) as raised:
        call_command(
            "rules", "apply", str(path), "--dry-run", stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert raised.value.returncode == 3


def test_apply_without_dry_run_proposes_a_draft_or_applies_where_review_is_off(
    demo: None, tmp_path: Path, settings: Any
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(_gpu_retargeted()))
    out, _ = _rules("apply", str(path))
    assert out.splitlines()[-1].startswith("draft: revision ")
    with pytest.raises(CommandError) as raised:
        _rules("apply", str(path), "--approve")
    assert "Review is on" in str(raised.value)


def test_apply_approve_applies_at_once_where_review_is_off(
    demo: None, tmp_path: Path, settings: Any
) -> None:
    settings.PORTAL_RULES_REVIEW = False
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(_gpu_retargeted()))
    out, _ = _rules("apply", str(path), "--approve")
    assert out.splitlines()[-1].startswith("applied: revision ")
    assert current_config() == _gpu_retargeted()


def test_a_direct_rule_edit_through_the_rules_api_is_recorded_as_a_revision(
    reviewers: tuple[Any, Any],
) -> None:
    alice, _ = reviewers
    rule = alice.get("/api/v1/rules/").json()["results"][0]
    assert (
        alice.patch(f"/api/v1/rules/{rule['id']}/", {"weight": 3.0}, format="json").status_code
        == 200
    )
    latest = alice.get(URL).json()["results"][0]
    assert latest["state"] == "applied" and latest["source"] == "api"
    assert latest["diff"]["rules"]["changed"][0]["fields"]["weight"]["to"] == 3.0


def test_the_fleet_page_and_the_admin_show_the_revision_trail(
    reviewers: tuple[Any, Any], client_for: Any
) -> None:
    alice_api, _ = reviewers
    draft = alice_api.post(
        URL, {"config": _gpu_retargeted(), "comment": "GPU retarget"}, format="json"
    )
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    page = client_for(users.get(username="scientist")).get("/fleet/")
    assert page.status_code == 200
    assert b"GPU retarget" in page.content and b"alice" in page.content

    bob = client_for(users.get(username="bob"))
    listing = bob.get("/admin/placement/rulerevision/?state__exact=draft")
    assert listing.status_code == 200 and b"GPU retarget" in listing.content
    detail = bob.get(f"/admin/placement/rulerevision/{draft.json()['id']}/change/")
    assert b"inference-on-gpu.effect" in detail.content
    assert b'value="approve"' in detail.content and b'value="apply"' in detail.content
    alice = client_for(users.get(username="alice"))
    form = {"action": "approve", "_selected_action": [draft.json()["id"]]}
    alice.post("/admin/placement/rulerevision/", form)
    assert alice_api.get(f"{URL}{draft.json()['id']}/").json()["state"] == "draft"
    bob.post("/admin/placement/rulerevision/", form)
    assert alice_api.get(f"{URL}{draft.json()['id']}/").json()["state"] == "approved"
    alice.post("/admin/placement/rulerevision/", {**form, "action": "apply"})
    assert alice_api.get(f"{URL}{draft.json()['id']}/").json()["state"] == "applied"


def test_a_cordon_through_the_sites_api_is_recorded_as_a_revision(
    reviewers: tuple[Any, Any],
) -> None:
    alice, _ = reviewers
    assert (
        alice.patch("/api/v1/sites/site-b/", {"cordoned": True}, format="json").status_code == 200
    )
    latest = alice.get(URL).json()["results"][0]
    assert latest["state"] == "applied" and latest["source"] == "cordon"
    change = latest["diff"]["sites"]["changed"][0]
    assert change["name"] == "site-b" and change["fields"]["cordoned"] == {
        "from": False,
        "to": True,
    }


@pytest.mark.django_db(transaction=True)
def test_two_drafts_racing_from_one_parent_one_wins_and_the_other_gets_the_conflict() -> None:
    import threading

    from django.db import connection

    from placement.revisions import services as revision_services

    call_command("load_demo", verbosity=0)
    parent = revision_services.revision_baseline()
    users = [UserFactory(username=n, is_staff=True) for n in ("carol", "dave")]
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def draft(user: Any) -> None:
        try:
            barrier.wait()
            outcomes.append(
                revision_services.revision_draft_create(
                    user=user, config=_gpu_retargeted(), parent_id=parent.pk
                )
            )
        except revision_services.RevisionConflict as exc:
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=draft, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = [o for o in outcomes if not isinstance(o, Exception)]
    conflicts = [o for o in outcomes if isinstance(o, revision_services.RevisionConflict)]
    assert len(made) == 1 and len(conflicts) == 1
    assert conflicts[0].newer.pk == made[0].pk


def test_review_refuses_what_the_state_does_not_allow(reviewers: tuple[Any, Any]) -> None:
    alice, bob = reviewers
    draft = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    active = draft["parent"]
    again = alice.post(f"{URL}{active}/apply/")
    assert again.status_code == 400 and "applied revision cannot be applied" in str(again.json())
    never = alice.post(f"{URL}{draft['id']}/rollback/", {}, format="json")
    assert never.status_code == 400
    assert bob.post(f"{URL}{draft['id']}/reject/").status_code == 200
    assert bob.post(f"{URL}{draft['id']}/approve/").status_code == 400
    # The rejected draft frees its parent for another.
    assert alice.post(URL, {"config": _gpu_retargeted()}, format="json").status_code == 201


def test_an_approved_draft_whose_parent_was_replaced_gets_409_on_apply(
    reviewers: tuple[Any, Any],
) -> None:
    alice, bob = reviewers
    draft = alice.post(URL, {"config": _gpu_retargeted()}, format="json").json()
    assert bob.post(f"{URL}{draft['id']}/approve/").status_code == 200
    # Meanwhile a direct cordon makes a newer active revision.
    assert bob.patch("/api/v1/sites/site-a/", {"cordoned": True}, format="json").status_code == 200
    newer = alice.get(URL).json()["results"][0]
    response = alice.post(f"{URL}{draft['id']}/apply/")
    assert response.status_code == 409 and response.json()["newer"] == newer["id"]
