"""Writes to the inventory. Views, serializers and admin actions call these and nothing else."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import transaction
from django.utils import timezone

from sites.choices import ReplicaState
from sites.merge_patch import Change, changes, merge_patch
from sites.models import Dataset, DatasetReplica, Project, Site
from sites.permissions import AnyUser
from sites.selectors import site_recent_runs
from sites.validators import overrides_problems

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
    change is logged with who made it, and kept in the site's admin history (``LogEntry``).
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
        if user is not None and user.is_authenticated:
            # The site's admin history shows who cordoned it and when, from whichever door
            # (the admin, the fleet page, the API).
            LogEntry.objects.log_actions(
                user.pk,
                [site],
                CHANGE,
                change_message="Cordoned: no new placements" if cordoned else "Uncordoned",
                single_object=True,
            )
        logger.info(
            "site %s %s by %s at %s",
            site.name,
            "cordoned" if cordoned else "uncordoned",
            _who(user),
            timezone.now().isoformat(),
        )
    return bool(changed)


class SiteUpdateRefused(Exception):
    """The change was not made: ``problems`` are ``(path, message)`` with paths inside the
    site's ``field`` (``artifact_store`` in ``overrides``)."""

    def __init__(self, field: str, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}.{p}: {m}" for p, m in problems))
        self.field = field
        self.problems = problems


def _store_moved(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """How the site's artifact store stops being where its outputs are, if it does."""
    old, new = before.get("artifact_store"), after.get("artifact_store")
    if not isinstance(old, dict):
        return None
    if not isinstance(new, dict):
        return "removing"
    where = ("endpoint", "bucket")
    if any(old.get(key) != new.get(key) for key in where):
        return "moving"
    return None


def _operator_fields(site: Site) -> dict[str, Any]:
    return {
        "cordoned": site.cordoned,
        "labels": site.labels,
        "overrides": site.overrides,
        "refusal_grace_seconds": site.refusal_grace_seconds,
    }


def _merged_overrides(site: Site, patch: dict[str, Any] | None, *, force: bool) -> dict[str, Any]:
    """``site``'s overrides with ``patch`` merged in (None: all deleted), checked; refused when
    it removes or moves an artifact store recent runs' outputs are in, unless ``force``."""
    merged = {} if patch is None else merge_patch(site.overrides or {}, patch)
    problems = overrides_problems(merged)
    if problems:
        raise SiteUpdateRefused("overrides", problems)
    how = _store_moved(site.overrides or {}, merged)
    if how and not force:
        runs = site_recent_runs(site, hours=settings.PORTAL_RECENT_RUN_HOURS)
        if runs:
            raise SiteUpdateRefused(
                "overrides",
                [
                    (
                        "artifact_store",
                        f"{how.capitalize()} the artifact store of {site.name} would "
                        f"lose the outputs of {runs} active or recent run(s) (finished "
                        f"within {settings.PORTAL_RECENT_RUN_HOURS} h): the steps that "
                        "read them would fail to resolve the artifact repository. Send "
                        '"force": true to do it anyway.',
                    )
                ],
            )
    return merged


def site_update(
    *,
    site: Site,
    user: AnyUser | None,
    cordoned: bool | None = None,
    labels: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = _UNSET,
    force: bool = False,
    refusal_grace_seconds: int | None = _UNSET,
) -> list[Change]:
    """Change the operator fields of a site and answer what changed, leaf by leaf.

    ``labels`` replaces the old ones; ``overrides`` is a JSON merge patch (RFC 7386) of the
    stored ones (``null`` deletes a key; ``None`` for the whole patch deletes them all).
    Removing or moving the artifact store of a site that holds the outputs of an active or
    recent run (``PORTAL_RECENT_RUN_HOURS``) is refused unless ``force``: the steps that read
    those outputs elsewhere would fail to resolve the repository."""
    with transaction.atomic():
        locked = Site.objects.select_for_update().get(pk=site.pk)
        before = _operator_fields(locked)
        fields: list[str] = []
        if labels is not None:
            locked.labels = labels
            fields.append("labels")
        if overrides is not _UNSET:
            locked.overrides = _merged_overrides(locked, overrides, force=force)
            fields.append("overrides")
        if refusal_grace_seconds is not _UNSET:
            locked.refusal_grace_seconds = refusal_grace_seconds
            fields.append("refusal_grace_seconds")
        if cordoned is not None:
            site_set_cordoned(site=locked, cordoned=cordoned, user=user)
        if fields:
            operator_change.changing()
            locked.save(update_fields=fields)
            operator_change.changed(user, "site")
            logger.info("site %s: %s changed by %s", locked.name, ", ".join(fields), _who(user))
        after = _operator_fields(locked)
    site.cordoned, site.labels, site.overrides = locked.cordoned, locked.labels, locked.overrides
    site.refusal_grace_seconds = locked.refusal_grace_seconds
    return changes(before, after, "")


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
