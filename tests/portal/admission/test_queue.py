"""The decision queue: decisions written once, later, and never lost."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.admission import decide
from portal.admission import queue as decision_queue
from portal.choices import DecisionSource
from portal.controller.bindings import binding_observe
from portal.models import PlacementDecision, UnitRun
from tests.portal.admission.helpers import (
    answer,
    direct_workflow,
    post,
    real_step_workflow,
    review,
)


def test_the_drain_writes_each_decision_once_even_when_run_again(client, demo_run):
    queue = decision_queue._queue()
    answer(post(client, review(real_step_workflow(demo_run), uid="once"), flush=False))
    pending = queue.lrange(decision_queue._queue_key(), 0, -1)

    assert decision_queue.decisions_flush() == 1
    # A drainer that wrote its batch and died before trimming leaves the entry behind:
    queue.rpush(decision_queue._queue_key(), *pending)
    assert decision_queue.decisions_flush() == 1
    assert decision_queue.decisions_flush() == 0
    assert PlacementDecision.objects.filter(admission_uid="once").count() == 1


def test_an_entry_the_database_refuses_does_not_block_the_queue(client, demo_run):
    queue = decision_queue._queue()
    queue.rpush(decision_queue._queue_key(), b"not json", json.dumps({"uid": "x" * 300}))
    answer(post(client, review(real_step_workflow(demo_run), uid="after"), flush=False))

    decision_queue.decisions_flush()

    assert queue.llen(decision_queue._queue_key()) == 0
    assert PlacementDecision.objects.filter(admission_uid="after").exists()


@pytest.mark.parametrize("queue_url", ["", "redis://127.0.0.1:9/0"])
def test_without_a_reachable_queue_the_decision_is_written_at_once(
    client, demo_run, settings, queue_url
):
    settings.PORTAL_DECISION_QUEUE_URL = queue_url
    _, patch = answer(post(client, review(real_step_workflow(demo_run), uid="now"), flush=False))

    assert patch is not None
    decision = PlacementDecision.objects.get(admission_uid="now")
    assert decision.site == "site-b"
    assert demo_run.units.get(name="preprocess").site == "site-b"


def test_a_queued_decision_is_not_mistaken_for_the_fallback_policy(client, demo_run):
    """The watcher may see the binding before any drain ran: it writes the queue first."""
    obj = real_step_workflow(demo_run)
    answer(post(client, review(obj, uid="race"), flush=False))
    unit = demo_run.units.get(name="preprocess")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=obj["metadata"]["name"])
    binding = {
        "spec": {
            "resource": {"kind": "Workflow", "name": obj["metadata"]["name"]},
            "clusters": [{"name": "site-b"}],
        }
    }

    binding_observe(binding)

    sources = set(PlacementDecision.objects.filter(unit=unit).values_list("source", flat=True))
    assert sources == {DecisionSource.WEBHOOK}
    assert demo_run.units.get(name="preprocess").site == "site-b"


def test_a_superseded_attempt_keeps_its_decision_but_not_the_unit(client, demo_run):
    answer(post(client, review(real_step_workflow(demo_run), uid="old"), flush=False))
    UnitRun.objects.filter(run=demo_run, name="preprocess").update(attempt=2)

    decision_queue.decisions_flush()

    assert PlacementDecision.objects.get(admission_uid="old").attempt == 1
    assert demo_run.units.get(name="preprocess").site == ""


def test_a_drain_never_trims_while_another_drainer_holds_the_lock(client, demo_run):
    queue = decision_queue._queue()
    key = decision_queue._queue_key()
    answer(post(client, review(real_step_workflow(demo_run), uid="held"), flush=False))
    queue.set(f"{key}:drain-lock", "someone-else")

    assert decision_queue.decisions_flush() == 0
    assert queue.llen(key) == 1
    assert not PlacementDecision.objects.filter(admission_uid="held").exists()
    queue.delete(f"{key}:drain-lock")
    assert decision_queue.decisions_flush() == 1


def test_a_drain_with_redis_down_says_so_and_loses_nothing(client, demo_run, settings):
    answer(post(client, review(real_step_workflow(demo_run), uid="kept"), flush=False))
    settings.PORTAL_DECISION_QUEUE_URL = "redis://127.0.0.1:9/0"
    with pytest.raises(decision_queue.QueueUnavailable):
        decision_queue.decisions_flush()
    settings.PORTAL_DECISION_QUEUE_URL = settings.REDIS_URL
    assert decision_queue.decisions_flush() == 1


def test_a_direct_workflow_decision_is_queued_too(client, demo_run):
    decide.snapshot_get()  # warm, as under load
    with CaptureQueriesContext(connection) as ctx:
        _, patch = answer(post(client, review(direct_workflow(), namespace="argo"), flush=False))
    assert patch is not None
    assert ctx.captured_queries == []  # no templateRef: no catalogue to read
    assert not PlacementDecision.objects.filter(workflow_name="hello-x7k2p").exists()
    assert decision_queue.decisions_flush() == 1
    assert PlacementDecision.objects.get(workflow_name="hello-x7k2p").run is None


def test_the_resync_writes_queued_decisions_when_no_watcher_runs(client, demo_run):
    from portal import tasks

    answer(post(client, review(real_step_workflow(demo_run), uid="beat"), flush=False))
    tasks.resync()
    assert PlacementDecision.objects.filter(admission_uid="beat").exists()


def test_the_fallback_policy_is_still_recorded_when_the_webhook_did_not_place(demo_run):
    obj = real_step_workflow(demo_run)
    unit = demo_run.units.get(name="preprocess")
    UnitRun.objects.filter(pk=unit.pk).update(workflow_name=obj["metadata"]["name"])
    binding_observe(
        {
            "spec": {
                "resource": {"kind": "Workflow", "name": obj["metadata"]["name"]},
                "clusters": [{"name": "site-c"}],
            }
        }
    )
    decision = PlacementDecision.objects.get(unit=unit)
    assert decision.source == DecisionSource.FALLBACK
    assert decision.site == "site-c"


# --------------------------------------------------------------------------------------------
# Pieces


def test_concurrent_pushes_all_land_and_share_round_trips():
    from concurrent.futures import ThreadPoolExecutor

    client = decision_queue._queue()
    key = decision_queue._queue_key()
    texts = [f"entry-{i}" for i in range(300)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda t: decision_queue._group_push(client, key, t), texts))
    assert sorted(x.decode() for x in client.lrange(key, 0, -1)) == sorted(texts)
    assert not decision_queue._pushes.pending and not decision_queue._pushes.busy


def test_a_failed_push_fails_every_entry_it_carried():
    from concurrent.futures import ThreadPoolExecutor

    import redis

    dead = redis.Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.25)

    def push(i: int) -> BaseException | None:
        try:
            decision_queue._group_push(dead, "k", str(i))
        except redis.RedisError as exc:
            return exc
        return None

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(push, range(40)))
    assert all(isinstance(o, redis.RedisError) for o in outcomes)
    assert not decision_queue._pushes.pending and not decision_queue._pushes.busy
