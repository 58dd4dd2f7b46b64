"""Liveness, readiness and metrics endpoints for probes and Prometheus."""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

READY_CHECKS = Counter("portal_readyz_failures_total", "Failed readiness checks", ["check"])
RUNS_BY_STATUS = Gauge("portal_runs", "Workflow runs by status", ["status"])
SITES_READY = Gauge("portal_sites_ready", "Sites reporting Ready", ["site"])


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return str(exc)
    return None


def _check_broker() -> str | None:
    from kombu import Connection

    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}),
            connect_timeout=2,
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # noqa: BLE001
        return str(exc)
    return None


def _check_karmada() -> str | None:
    from portal import gateway

    if not gateway.configured():
        return None  # not configured: the portal runs without a fleet (inventory only)
    try:
        gateway.ping()
    except Exception as exc:  # noqa: BLE001
        return str(exc)
    return None


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    started = time.monotonic()
    checks = {"database": _check_database(), "broker": _check_broker(), "karmada": _check_karmada()}
    failed = {name: err for name, err in checks.items() if err}
    for name in failed:
        READY_CHECKS.labels(check=name).inc()
    body = {
        "status": "ready" if not failed else "not ready",
        "checks": {name: (err or "ok") for name, err in checks.items()},
        "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
    }
    return JsonResponse(body, status=503 if failed else 200)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    from django.db.models import Count

    from portal.models import WorkflowRun
    from sites.models import Site

    for row in WorkflowRun.objects.values("status").annotate(n=Count("id")):
        RUNS_BY_STATUS.labels(status=row["status"]).set(row["n"])
    for name, ready in Site.objects.values_list("name", "ready"):
        SITES_READY.labels(site=name).set(1 if ready else 0)
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
