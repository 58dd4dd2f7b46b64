"""Cluster sync: Karmada Clusters into Sites, and the objects the portal keeps in step with
the inventory on karmada-apiserver (policies, the webhook's registration)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from placement import manifests, parser
from placement.revisions.selectors import active_revision_id
from portal import labels
from portal.karmada import client, lists, resources
from portal.karmada.errors import KarmadaError, TransientError
from portal.selectors.fleet import FLEET_POLICY_ERROR_KEY
from sites.choices import SyncMode
from sites.models import SUMMARY_FIELDS, Site

log = logging.getLogger(__name__)


def _quantity(value: Any, milli: bool = False) -> int:
    q = parser.parse_quantity(value)
    if q is None:
        return 0
    return round(q * 1000) if milli else int(q)


def _zone_of(spec: Mapping[str, Any]) -> str:
    """A Cluster's failure zones (``spec.zones``, what ``karmadactl join --cluster-zones`` and
    karmada-agent set), comma-separated; the deprecated ``spec.zone`` only when there are none
    (pkg/apis/cluster/v1alpha1/types.go: never used by Karmada)."""
    zones = spec.get("zones")
    if isinstance(zones, list) and zones:
        text = ",".join(str(z) for z in zones if z)
    else:
        text = str(spec.get("zone") or "")
    return text[: Site._meta.get_field("zone").max_length or len(text)]


def _cluster_values(
    cluster: Mapping[str, Any],
) -> tuple[str, bool, dict[str, Any], int, dict[str, Any]]:
    """What a Cluster says of its Site: (name, ready, labels, GPUs, the columns to write)."""
    meta = cluster.get("metadata") or {}
    spec = cluster.get("spec") or {}
    status = cluster.get("status") or {}
    name = str(meta.get("name"))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    summary = status.get("resourceSummary") or {}
    alloc = summary.get("allocatable") or {}
    used = summary.get("allocated") or {}
    # Pods created but not yet scheduled (Karmada's ``allocating``) will take their requests:
    # free is allocatable - allocated - allocating (pkg/controllers/status, resourceSummary).
    coming = summary.get("allocating") or {}

    def taken(resource: str, milli: bool = False) -> int:
        return _quantity(used.get(resource), milli) + _quantity(coming.get(resource), milli)

    gpus = _quantity(alloc.get("nvidia.com/gpu"))
    values: dict[str, Any] = {
        "region": spec.get("region") or "",
        "zone": _zone_of(spec),
        "provider": spec.get("provider") or "",
        "sync_mode": SyncMode.PULL if spec.get("syncMode") == "Pull" else SyncMode.PUSH,
        "cpu_allocatable": _quantity(alloc.get("cpu"), milli=True),
        "cpu_allocated": taken("cpu", milli=True),
        "memory_allocatable": _quantity(alloc.get("memory")),
        "memory_allocated": taken("memory"),
        "gpu_allocatable": gpus,
        "gpu_allocated": taken("nvidia.com/gpu"),
        "pods_allocatable": _quantity(alloc.get("pods")),
        "pods_allocated": taken("pods"),
        "taints": [
            {k: t[k] for k in ("key", "value", "effect") if t.get(k)}
            for t in spec.get("taints") or []
            if isinstance(t, dict)
        ],
        "last_sync": timezone.now(),
    }
    return name, ready, dict(meta.get("labels") or {}), gpus, values


def cluster_note(cluster: Mapping[str, Any]) -> bool:
    """``cluster_observe`` for the watcher: True when a Site was created or its readiness
    changed. A running fan-out moves every Cluster's ``resourceSummary`` many times a second
    and nothing else; such a change is one conditional UPDATE (same readiness, the Cluster's
    labels already on the Site, GPUs already a capability) instead of a locked read-modify-
    write, which was a quarter of the watcher's time under a 10,000-item fan-out."""
    if connection.vendor == "postgresql":  # jsonb containment; SQLite has none
        name, ready, cluster_labels, gpus, values = _cluster_values(cluster)
        same = Site.objects.filter(name=name, ready=ready, labels__contains=cluster_labels)
        if gpus:
            same = same.filter(capabilities__contains=["gpu"])
        if _summary_update(same, values):
            return False
    return cluster_observe(cluster)[1]


def _summary_update(sites: QuerySet[Site], values: Mapping[str, Any]) -> int:
    """Update ``sites`` with ``values``; ``summary_at`` moves only where the resource summary
    changed (a Cluster event for its labels or taints carries the member's older summary,
    which counts none of the steps that started since). Returns the rows updated."""
    same = Q(**{column: values[column] for column in SUMMARY_FIELDS})
    changed = sites.exclude(same).update(**values, summary_at=values["last_sync"])
    return changed or sites.filter(same).update(**values)


def cluster_observe(cluster: Mapping[str, Any]) -> tuple[Site, bool]:
    """Upsert the Site of a Karmada Cluster. Returns (site, created-or-readiness-changed)."""
    name, ready, cluster_labels, gpus, values = _cluster_values(cluster)
    now = values["last_sync"]
    with transaction.atomic():
        site, created = Site.objects.select_for_update().get_or_create(
            name=name,
            defaults={**values, "ready": ready, "ready_changed_at": now, "summary_at": now},
        )
        changed = created
        if not created:
            if site.ready != ready:
                values["ready"] = ready
                values["ready_changed_at"] = now
                changed = True
            # Cluster labels are the source of truth for their keys; labels operators add stay.
            merged = {**(site.labels or {}), **cluster_labels}
            if merged != site.labels:
                values["labels"] = merged
            _summary_update(Site.objects.filter(pk=site.pk), values)
            for k, v in values.items():
                setattr(site, k, v)
        else:
            Site.objects.filter(pk=site.pk).update(labels=cluster_labels)
        if gpus and "gpu" not in (site.capabilities or []):
            site.capabilities = [*(site.capabilities or []), "gpu"]
            Site.objects.filter(pk=site.pk).update(capabilities=site.capabilities)
    return site, changed


def cluster_deleted(name: str) -> None:
    Site.objects.filter(name=name, ready=True).update(ready=False, ready_changed_at=timezone.now())


Key = tuple[str, str]  # (kind, name) of a policy on karmada-apiserver


def policies_sync() -> dict[str, int]:
    """Keep the per-site and fallback PropagationPolicies, the per-site OverridePolicies and
    (``PORTAL_WEBHOOK_REGISTER``) the webhook configuration in step with the inventory: create
    or update what should be there, delete what should not."""
    ns = client.namespace()
    client.ensure_namespace(ns)
    wanted, owner = _policies_wanted(ns)
    counts = {"applied": 0, "deleted": 0}
    if settings.PORTAL_WEBHOOK_REGISTER:
        webhook_register()
        counts["applied"] += 1
    present = _policies_present()
    failed: list[KarmadaError] = []
    errors: dict[str, list[str]] = {}  # by site ("" for the objects of no site)
    for (kind, name), body in wanted.items():
        current = present.get((kind, name))
        if current is not None and client.owned_in_step(current, body):
            counts["in_step"] = counts.get("in_step", 0) + 1
            continue
        # One object Karmada refuses must not keep the others (a new site's policy, an
        # override change) from being written.
        try:
            client.apply(resources.BY_KIND[kind], body)
        except KarmadaError as exc:
            log.error("could not write %s %s: %s", kind, name, exc)
            failed.append(exc)
            errors.setdefault(owner.get((kind, name), ""), []).append(f"{kind} {name}: {exc}")
            continue
        counts["applied"] += 1
    counts["failed"] = len(failed)
    _policy_errors_record(errors)
    for kind, name in present:
        if (kind, name) not in wanted:
            client.delete(resources.BY_KIND[kind], name)
            counts["deleted"] += 1
    # A transient failure is retried by the task (with backoff); the resync tries again anyway.
    transient = [e for e in failed if isinstance(e, TransientError)]
    if transient:
        raise transient[0]
    return counts


def _policies_wanted(ns: str) -> tuple[dict[Key, dict[str, Any]], dict[Key, str]]:
    """The policies the inventory wants, by (kind, name), and the site each belongs to
    ("" for none), annotated with the rule revision that wrote them."""
    domain = settings.PORTAL_LABEL_DOMAIN
    prefix = settings.PORTAL_POLICY_PREFIX
    wanted: dict[Key, dict[str, Any]] = {}
    owner: dict[Key, str] = {}
    for name, overrides in Site.objects.values_list("name", "overrides"):
        pp = manifests.propagation_policy(name, namespace=ns, domain=domain, prefix=prefix)
        wanted[("PropagationPolicy", pp["metadata"]["name"])] = pp
        owner[("PropagationPolicy", pp["metadata"]["name"])] = name
        for op in manifests.override_policies(
            name, overrides or {}, namespace=ns, domain=domain, prefix=prefix
        ):
            wanted[("OverridePolicy", op["metadata"]["name"])] = op
            owner[("OverridePolicy", op["metadata"]["name"])] = name
    fb = manifests.fallback_policy(namespace=ns, domain=domain)
    wanted[("PropagationPolicy", fb["metadata"]["name"])] = fb
    # Each site's repository Secret goes to that site only; the every-member policy of old
    # is not wanted, so the sync deletes it where it is still there.
    for name, overrides in Site.objects.values_list("name", "overrides"):
        secret = ((overrides or {}).get("artifact_store") or {}).get("credentials_secret")
        if secret:
            creds = manifests.artifact_credentials_policy(
                name, str(secret), namespace=ns, domain=domain
            )
            wanted[("PropagationPolicy", creds["metadata"]["name"])] = creds
            owner[("PropagationPolicy", creds["metadata"]["name"])] = name
    revision = active_revision_id()
    if revision is not None:
        # Which configuration each object came from: a rollback rewrites them, and an operator
        # reading one on karmada-apiserver can find the revision that wrote it.
        for body in wanted.values():
            meta = body["metadata"]
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                labels.key(labels.RULES_REVISION): str(revision),
            }
    return wanted, owner


def _policies_present() -> dict[Key, dict[str, Any]]:
    """The portal's policies on karmada-apiserver, one list per kind: an object in step with
    what the portal wants is not written (the resync runs the sync every few seconds; writing
    every policy was a create and a read per object, two requests per site each time)."""
    selector = f"{labels.key(labels.MANAGED)}=true"
    present: dict[Key, dict[str, Any]] = {}
    for resource in (resources.PROPAGATION_POLICY, resources.OVERRIDE_POLICY):
        items, _ = lists.list_objects(resource, label_selector=selector)
        present.update({(resource.kind, item["metadata"]["name"]): item for item in items})
    return present


def _policy_errors_record(errors: Mapping[str, list[str]]) -> None:
    """Keep what the last sync could not write where the web process sees it: a site's on its
    row (the fleet page, ``/readyz`` detail, the ``portal_policy_write_failures`` metric), the
    fallback policy's in the shared cache."""
    for name in (
        Site.objects.exclude(policy_error="")
        .exclude(name__in=errors)
        .values_list("name", flat=True)
    ):
        Site.objects.filter(name=name).update(policy_error="")
    for name, messages in errors.items():
        if name:
            Site.objects.filter(name=name).update(policy_error="; ".join(messages)[:2000])
    fleet = "; ".join(errors.get("", []))
    if fleet:
        cache.set(FLEET_POLICY_ERROR_KEY, fleet[:2000], timeout=None)
    else:
        cache.delete(FLEET_POLICY_ERROR_KEY)


# The webhook's registration is applied with the policies (``PORTAL_WEBHOOK_REGISTER``).
def webhook_url() -> str:
    """``PORTAL_WEBHOOK_URL`` with the token as a path segment: karmada-apiserver's
    ``clientConfig.url`` cannot carry headers, so the URL is the credential (keep the printed
    configuration as secret as the token)."""
    url = settings.PORTAL_WEBHOOK_URL
    token = settings.PORTAL_WEBHOOK_TOKEN
    if not token:
        return url
    return f"{url.rstrip('/')}/{token}/"


def webhook_configuration() -> dict[str, Any]:
    """The MutatingWebhookConfiguration for karmada-apiserver (DESIGN section 3)."""
    return manifests.webhook_configuration(
        webhook_url(),
        ca_bundle=settings.PORTAL_WEBHOOK_CA_BUNDLE or None,
        domain=settings.PORTAL_LABEL_DOMAIN,
    )


def webhook_register() -> dict[str, Any]:
    """Create or replace the configuration on karmada-apiserver; returns what was applied."""
    body = webhook_configuration()
    client.apply_mutating_webhook(body)
    return body
