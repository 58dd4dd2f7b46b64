from django.apps import AppConfig


class SitesConfig(AppConfig):
    name = "sites"
    verbose_name = "Sites and data"
    default_auto_field = "django.db.models.BigAutoField"
