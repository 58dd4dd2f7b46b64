from django.apps import AppConfig


class PlacementConfig(AppConfig):
    name = "placement"
    verbose_name = "Placement"
    default_auto_field = "django.db.models.BigAutoField"
