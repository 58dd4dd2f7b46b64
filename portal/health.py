"""Liveness, readiness and metrics endpoints for probes and Prometheus.

``/readyz`` answers within its own budget (``PORTAL_READYZ_BUDGET_SECONDS``): the database is
checked on the request, the broker and Karmada are probed by a background thread at most once
every ``PORTAL_READYZ_CACHE_SECONDS`` per process and the request reads the last result. So a
Karmada that accepts connections and never answers costs one probe thread per process, never a
web worker per hit, and many hits cost one call. Anonymous callers see only ``ok`` or a one-word
category per check; staff (or everyone, with ``PORTAL_READYZ_DETAIL``) see the error text, which
names hosts and users.

``/metrics`` is open unless ``PORTAL_METRICS_TOKEN`` (``Authorization: Bearer <token>``) or
``PORTAL_METRICS_ALLOWED_NETWORKS`` (CIDRs matched against ``REMOTE_ADDR``) is set; with either
set a caller must satisfy one of them.
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

READY_CHECKS = Counter("portal_readyz_failures_total", "Failed readiness checks", ["check"])
RUNS_BY_STATUS = Gauge("portal_runs", "Workflow runs by status", ["status"])
SITES_READY = Gauge("portal_sites_ready", "Sites reporting Ready", ["site"])
POLICY_FAILURES = Gauge(
    "portal_policy_write_failures",
    "Policies the last sync could not write on Karmada (1: failing), by site ('' for fleet-wide)",
    ["site"],
)


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@dataclass
class _Outcome:
    error: str | None
    category: str  # what an anonymous caller sees: "ok", "unreachable" or "failed"


def _failed(exc: BaseException) -> _Outcome:
    return _Outcome(str(exc) or exc.__class__.__name__, "failed")


def _check_database() -> _Outcome:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return _failed(exc)
    return _Outcome(None, "ok")


def _check_broker() -> _Outcome:
    from kombu import Connection

    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            transport=getattr(settings, "CELERY_BROKER_TRANSPORT", None),
            transport_options=getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}),
            connect_timeout=2,
        ) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
    except Exception as exc:  # noqa: BLE001
        return _failed(exc)
    return _Outcome(None, "ok")


def _check_karmada() -> _Outcome:
    from portal.karmada import client, errors

    if not client.configured():
        # not configured: the portal runs without a fleet (inventory only)
        return _Outcome(None, "ok")
    try:
        client.ping()
    except errors.TransientError as exc:
        return _Outcome(exc.message, "unreachable" if exc.status is None else "failed")
    except Exception as exc:  # noqa: BLE001
        return _failed(exc)
    return _Outcome(None, "ok")


@dataclass
class _Entry:
    outcome: _Outcome | None = None
    checked_at: float = 0.0
    started_at: float = 0.0
    running: threading.Event | None = None
    done: threading.Event = field(default_factory=threading.Event)


class CachedProbe:
    """One check run by a background thread, at most once per ``PORTAL_READYZ_CACHE_SECONDS``
    for each target (``key()``: the broker URL, the kubeconfig), its last result shared by
    every request of the process."""

    def __init__(self, name: str, check: Callable[[], _Outcome], key: Callable[[], Hashable]):
        self.name, self._check, self._key = name, check, key
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}

    def _refresh(self, entry: _Entry, running: threading.Event) -> None:
        try:
            outcome = self._check()
        except Exception as exc:  # noqa: BLE001 - a probe never raises into the view
            outcome = _failed(exc)
        with self._lock:
            entry.outcome, entry.checked_at = outcome, time.monotonic()
            entry.running = None
        running.set()
        entry.done.set()

    def outcome(self, budget: float) -> _Outcome:
        ttl = float(settings.PORTAL_READYZ_CACHE_SECONDS)
        key = self._key()
        now = time.monotonic()
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            fresh = entry.outcome is not None and now - entry.checked_at < ttl
            if not fresh and entry.running is None:
                entry.running, entry.started_at = threading.Event(), now
                threading.Thread(
                    target=self._refresh,
                    args=(entry, entry.running),
                    name=f"readyz-{self.name}",
                    daemon=True,
                ).start()
            running = entry.running
        if entry.outcome is None and running is not None:
            # The first probe of this target: wait for it, within the budget counted from
            # when it started (later hits do not each wait the whole budget again).
            running.wait(max(0.0, budget - (now - entry.started_at)))
        with self._lock:
            outcome, running, started = entry.outcome, entry.running, entry.started_at
        waited = time.monotonic() - started
        if running is not None and waited > max(ttl, budget) * 2:
            return _Outcome(f"no answer for {waited:.0f}s", "unreachable")
        if outcome is None:
            return _Outcome(f"no answer within {budget:g}s", "unreachable")
        return outcome

    def forget(self) -> None:
        with self._lock:
            self._entries.clear()


BROKER_PROBE = CachedProbe("broker", _check_broker, lambda: settings.CELERY_BROKER_URL)
KARMADA_PROBE = CachedProbe(
    "karmada",
    _check_karmada,
    lambda: (settings.KARMADA_KUBECONFIG, settings.KARMADA_IN_CLUSTER),
)


def _shows_detail(request: HttpRequest) -> bool:
    if settings.PORTAL_READYZ_DETAIL:
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    started = time.monotonic()
    budget = float(settings.PORTAL_READYZ_BUDGET_SECONDS)
    checks = {
        "database": _check_database(),
        "broker": BROKER_PROBE.outcome(budget / 2),
        "karmada": KARMADA_PROBE.outcome(budget / 2),
    }
    failed = [name for name, outcome in checks.items() if outcome.error]
    for name in failed:
        READY_CHECKS.labels(check=name).inc()
    detail = _shows_detail(request)
    body: dict[str, object] = {
        "status": "ready" if not failed else "not ready",
        "checks": {
            name: (outcome.error if detail else outcome.category) or "ok"
            for name, outcome in checks.items()
        },
        "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
    }
    if detail and not failed:
        # A policy Karmada refuses does not make the portal unready (the other sites still
        # work), but whoever may see the detail is told which one and why (with the database
        # down there is nothing to read it from).
        from portal.selectors.fleet import policy_errors

        errors = policy_errors()
        if errors:
            body["policies"] = {site or "fleet": text for site, text in errors.items()}
    return JsonResponse(body, status=503 if failed else 200)


def _metrics_allowed(request: HttpRequest) -> bool:
    token = settings.PORTAL_METRICS_TOKEN
    networks = settings.PORTAL_METRICS_ALLOWED_NETWORKS
    if not token and not networks:
        return True
    if token:
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(net, strict=False) for net in networks)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    from django.db.models import Count

    from portal.models import WorkflowRun
    from sites.models import Site

    if not _metrics_allowed(request):
        return JsonResponse({"error": "metrics are restricted"}, status=403)
    for row in WorkflowRun.objects.values("status").annotate(n=Count("id")):
        RUNS_BY_STATUS.labels(status=row["status"]).set(row["n"])
    for name, ready in Site.objects.values_list("name", "ready"):
        SITES_READY.labels(site=name).set(1 if ready else 0)
    from portal.selectors.fleet import policy_errors

    errors = policy_errors()
    for name in [*Site.objects.values_list("name", flat=True), ""]:
        POLICY_FAILURES.labels(site=name).set(1 if name in errors else 0)
    from portal.quotas import metrics as quota_metrics

    quota_metrics.refresh()
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
