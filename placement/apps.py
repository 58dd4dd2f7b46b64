from django.apps import AppConfig


class PlacementConfig(AppConfig):
    name = "placement"
    verbose_name = "Placement"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from placement.revisions.services import revision_baseline, revision_record_direct
        from sites.services import operator_change

        # Cordons, site labels and overrides, residency and links changed outside a revision
        # are recorded as applied revisions, as direct rule edits are.
        operator_change.register(
            before=lambda: revision_baseline() and None,
            after=lambda user, source: revision_record_direct(user=user, source=source) and None,
        )
