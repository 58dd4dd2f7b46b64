"""An advance is bounded: expression errors end the unit with the message, an advance that
keeps failing ends the run in Error, one advance per run at a time, and a Karmada outage is
said on the unit. PostgreSQL and Redis, no worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from placement import manifests
from portal import services
from portal.controller import reconcile, worker
from portal.controller.advance import run_advance
from portal.controller.common import units_of
from portal.controller.reconcile import Result
from portal.controller.workqueue import claims
from portal.karmada import client, errors
from portal.models import RunEvent, UnitRun, WorkflowRun

WHEN = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: bounded}
spec:
  entrypoint: main
  arguments: {parameters: [{name: x, value: a}]}
  templates:
  - name: main
    dag:
      tasks:
      - {name: first, template: work, when: "'{{workflow.parameters.x}}' == 'a'"}
  - name: work
    container: {image: alpine:3.19, command: ["true"]}
"""


@pytest.fixture
def run(transactional_db: Any, settings: Any) -> Iterator[WorkflowRun]:
    call_command("load_demo", verbosity=0)
    settings.KARMADA_KUBECONFIG = ""
    user = User.objects.get(username="scientist")
    r = services.run_submit(user=user, body=WHEN, project="eo-demo")
    client = claims.redis_client()
    assert client is not None, "these tests need REDIS_URL"
    keys = [k % r.pk for k in (claims.QUEUED, claims.AGAIN, claims.TRIES, claims.LAST_ERROR)]
    client.delete(*keys)
    yield r
    client.delete(*keys)


@pytest.mark.parametrize(
    "error", [RecursionError("deep"), UnicodeDecodeError("utf-8", b"\\x", 0, 1, "bad escape")]
)
def test_it_errors_the_unit_when_its_when_cannot_be_evaluated(
    run: WorkflowRun, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def crash(*args: Any, **kwargs: Any) -> bool:
        raise error

    monkeypatch.setattr(manifests, "evaluate_when", crash)
    run_advance(run.pk)
    unit = UnitRun.objects.get(run=run, name="first")
    assert unit.phase == "Error"
    assert type(error).__name__ in unit.message
    run.refresh_from_db()
    assert run.status == "Error"
    assert "first:" in run.message and type(error).__name__ in run.message


def test_it_marks_the_run_error_when_its_advance_keeps_failing(
    run: WorkflowRun, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.PORTAL_ADVANCE_MAX_FAILURES = 3

    def broken(run_id: int, turn: Any = None) -> bool:
        raise ValueError("a bug in the advance")

    monkeypatch.setattr(reconcile, "run_advance", broken)
    assert worker.reconcile_once(run.pk) == (Result(requeue_after=5.0), False)  # not forever
    assert worker.reconcile_once(run.pk) == (Result(requeue_after=10.0), False)
    assert worker.reconcile_once(run.pk) == (Result(), False)
    run.refresh_from_db()
    assert run.status == "Error"
    assert "failed 3 times" in run.message and "a bug in the advance" in run.message
    assert RunEvent.objects.filter(run=run, kind="run-finished").exists()


def test_it_gives_up_on_a_run_whose_advances_never_return(run: WorkflowRun, settings: Any) -> None:
    """Killed by the hard time limit, an advance says nothing: the count of advances that
    started and never ended does."""
    settings.PORTAL_ADVANCE_MAX_FAILURES = 2
    claims.tries_begin(run.pk)
    claims.tries_begin(run.pk)
    assert worker.reconcile_once(run.pk) == (Result(), False)
    run.refresh_from_db()
    assert run.status == "Error"
    assert "did not finish" in run.message


def _other_session_holds_the_lock(run_id: int) -> psycopg.Connection[Any]:
    s = connection.settings_dict
    conn = psycopg.connect(
        host=s["HOST"] or "127.0.0.1",
        port=s["PORT"] or 5432,
        user=s["USER"] or "postgres",
        dbname=s["NAME"],
        autocommit=True,
    )
    conn.execute("SELECT pg_advisory_lock(%s, %s)", [claims._LOCK_SPACE, run_id])
    return conn


def test_an_advance_of_a_locked_run_is_left_to_the_holder(
    run: WorkflowRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(reconcile, "run_advance", lambda run_id, turn=None: calls.append(run_id))
    holder = _other_session_holds_the_lock(run.pk)
    try:
        assert worker.reconcile_once(run.pk) is None
        assert calls == []  # never two advances of one run at once
    finally:
        holder.close()
    # The holder, once it unlocks, finds the request and asks for one more advance.
    assert claims.asked_again(run.pk)
    assert worker.reconcile_once(run.pk) == (Result(), False)
    assert calls == [run.pk]


def test_requests_for_a_queued_advance_are_coalesced(run: WorkflowRun) -> None:
    assert claims.should_enqueue(run.pk)
    assert not claims.should_enqueue(run.pk)
    assert not claims.should_enqueue(run.pk)
    claims.started(run.pk)  # a request after the task read the units needs a task of its own
    assert claims.should_enqueue(run.pk)


def test_a_unit_waiting_for_karmada_says_why(
    run: WorkflowRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: Any, **kwargs: Any) -> None:
        raise errors.TransientError("Karmada unreachable: ConnectionRefusedError")

    monkeypatch.setattr(client, "create", down)
    for _ in range(2):  # the task's retries: one event per outage, not one per retry
        with pytest.raises(errors.TransientError):
            run_advance(run.pk)
    unit = UnitRun.objects.get(run=run, name="first")
    assert unit.phase == "Pending"
    assert unit.message.startswith("waiting for Karmada:")
    assert "unreachable" in unit.message
    events = RunEvent.objects.filter(run=run, kind="karmada-unavailable")
    assert events.count() == 1


CHAIN = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: chained}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: first, template: work}
      - {name: tile, template: work, dependencies: [first], withItems: [a, b, c, d, e, f]}
      - {name: last, template: work, dependencies: [tile]}
  - name: work
    container: {image: alpine:3.19, command: ["true"]}
"""


def test_an_advance_reads_the_units_upstream_without_a_query_each(transactional_db: Any) -> None:
    # ``upstream`` is read with the units: deferred, it would cost a query per unit in every
    # pass, and a big fan-out would be created at a crawl.
    call_command("load_demo", verbosity=0)
    user = User.objects.get(username="scientist")
    run = services.run_submit(user=user, body=CHAIN, project="eo-demo")
    units = units_of(run)
    with CaptureQueriesContext(connection) as queries:
        read = {u.name: list(u.upstream) for u in units}
    assert len(queries) == 0
    stored = dict(UnitRun.objects.filter(run=run).values_list("name", "upstream"))
    assert read == stored
    assert read["last"] == [f"tile({i}:{x})" for i, x in enumerate("abcdef")]
