from typing import Any

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Workflow runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from placement.revisions.services import on_apply
        from portal import checks  # noqa: F401 - registers the deploy checks

        on_apply(_policies_follow)


def _policies_follow(revision: Any) -> None:
    """An applied rule revision rewrites the Karmada policies at the next sync, queued now."""
    from portal import tasks

    tasks.policies_sync.delay()
