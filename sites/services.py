"""Writes to the inventory. Views, serializers and admin actions call these and nothing else."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from sites.choices import ReplicaState
from sites.models import Dataset, DatasetReplica, Project, Site
from sites.permissions import AnyUser

logger = logging.getLogger(__name__)

_UNSET: Any = object()


@dataclass(frozen=True)
class ReplicaInput:
    """One copy of a dataset as a client describes it."""

    site: Site
    uri: str = ""
    bytes: int = 0
    state: str = ReplicaState.READY


class _OperatorChangeHooks:
    """Callbacks around a change of the fields the placement configuration holds (cordons,
    labels, overrides, residency, links): ``before()`` and ``after(user, source)``. The
    placement app registers its revision recording here (``sites`` does not import it)."""

    def __init__(self) -> None:
        self.before: list[Callable[[], object]] = []
        self.after: list[Callable[[AnyUser | None, str], object]] = []

    def register(
        self, *, before: Callable[[], object], after: Callable[[AnyUser | None, str], object]
    ) -> None:
        self.before.append(before)
        self.after.append(after)

    def changing(self) -> None:
        for callback in self.before:
            callback()

    def changed(self, user: AnyUser | None, source: str) -> None:
        for callback in self.after:
            callback(user, source)


operator_change = _OperatorChangeHooks()


def _who(user: AnyUser | None) -> str:
    if user is None or not user.is_authenticated:
        return "system"
    return user.get_username()


def site_set_cordoned(*, site: Site, cordoned: bool, user: AnyUser | None) -> bool:
    """Cordon (no new placements) or uncordon ``site``; returns whether anything changed.

    The conditional UPDATE makes a repeated or concurrent request a no-op, and only a real
    change is logged with who made it.
    """
    with transaction.atomic():
        operator_change.changing()
        changed = (
            Site.objects.filter(pk=site.pk).exclude(cordoned=cordoned).update(cordoned=cordoned)
        )
        if changed:
            operator_change.changed(user, "cordon")
    site.cordoned = cordoned
    if changed:
        logger.info(
            "site %s %s by %s at %s",
            site.name,
            "cordoned" if cordoned else "uncordoned",
            _who(user),
            timezone.now().isoformat(),
        )
    return bool(changed)


def site_update(
    *,
    site: Site,
    user: AnyUser | None,
    cordoned: bool | None = None,
    labels: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Site:
    """Change the operator fields of a site; ``labels`` and ``overrides`` replace the old ones."""
    with transaction.atomic():
        if cordoned is not None:
            site_set_cordoned(site=site, cordoned=cordoned, user=user)
        fields: list[str] = []
        if labels is not None:
            site.labels = labels
            fields.append("labels")
        if overrides is not None:
            site.overrides = overrides
            fields.append("overrides")
        if fields:
            operator_change.changing()
            site.save(update_fields=fields)
            operator_change.changed(user, "site")
            logger.info("site %s: %s changed by %s", site.name, ", ".join(fields), _who(user))
    return site


def _replace_replicas(dataset: Dataset, replicas: Sequence[ReplicaInput]) -> None:
    """Make the dataset's replicas exactly ``replicas`` (matched by site)."""
    wanted = {r.site.pk: r for r in replicas}
    dataset.replicas.exclude(site_id__in=wanted).delete()
    existing = {r.site_id: r for r in dataset.replicas.all()}
    for site_id, item in wanted.items():
        replica = existing.get(site_id) or DatasetReplica(dataset=dataset, site=item.site)
        replica.uri = item.uri
        replica.bytes = item.bytes
        replica.state = item.state
        replica.save()


@transaction.atomic
def dataset_create(
    *,
    user: AnyUser | None,
    name: str,
    project: Project | None = None,
    uri_prefix: str = "",
    bytes: int = 0,
    format: str = "",
    residency: Sequence[str] = (),
    replicas: Sequence[ReplicaInput] = (),
) -> Dataset:
    """Register a dataset with its replicas, all or nothing."""
    dataset = Dataset.objects.create(
        name=name,
        project=project,
        uri_prefix=uri_prefix,
        bytes=bytes,
        format=format,
        residency=list(residency),
    )
    _replace_replicas(dataset, replicas)
    logger.info("dataset %s created by %s", dataset.name, _who(user))
    return dataset


@transaction.atomic
def dataset_update(
    *,
    dataset: Dataset,
    user: AnyUser | None,
    name: str = _UNSET,
    project: Project | None = _UNSET,
    uri_prefix: str = _UNSET,
    bytes: int = _UNSET,
    format: str = _UNSET,
    residency: Sequence[str] = _UNSET,
    replicas: Sequence[ReplicaInput] = _UNSET,
) -> Dataset:
    """Change the given fields; a given ``replicas`` list replaces the whole set of replicas."""
    changes: dict[str, Any] = {
        "name": name,
        "project": project,
        "uri_prefix": uri_prefix,
        "bytes": bytes,
        "format": format,
        "residency": list(residency) if residency is not _UNSET else _UNSET,
    }
    fields = [field for field, value in changes.items() if value is not _UNSET]
    if "residency" in fields:
        operator_change.changing()
    for field in fields:
        setattr(dataset, field, changes[field])
    if fields:
        dataset.save(update_fields=fields)
    if replicas is not _UNSET:
        _replace_replicas(dataset, replicas)
    if "residency" in fields:
        operator_change.changed(user, "dataset")
    logger.info("dataset %s changed by %s", dataset.name, _who(user))
    return dataset


def dataset_delete(*, dataset: Dataset, user: AnyUser | None) -> None:
    name = dataset.name
    dataset.delete()
    logger.info("dataset %s deleted by %s", name, _who(user))
