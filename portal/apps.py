from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Workflow runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal import checks  # noqa: F401 - registers the deploy checks
