from typing import Any

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Workflow runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db import models

        from placement.revisions.services import on_apply
        from portal import checks  # noqa: F401 - registers the deploy checks
        from portal.bulk import AnyOf

        for field in (models.ForeignKey, models.AutoField, models.BigAutoField):
            field.register_lookup(AnyOf)
        on_apply(_policies_follow)
        _decisions_writer_name()


def _policies_follow(revision: Any) -> None:
    """An applied rule revision rewrites the Karmada policies at the next sync, queued now."""
    from portal import tasks

    tasks.policies_sync.delay()


def _decisions_writer_name() -> None:
    """The controller writes the webhook's queued decisions before it reads where a runtime
    step went, through the webhook's queue, which it does not load itself."""
    from portal.admission import queue
    from portal.controller import bindings

    def write(wait: bool) -> str | None:
        try:
            queue.decisions_flush(wait=wait)
        except queue.QueueUnavailable as exc:
            return str(exc)
        return None

    bindings.decisions_writer_set(write)
