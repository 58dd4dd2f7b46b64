from django.db import models


class Timing(models.TextChoices):
    """When a rule decides: at submission (static facts) or at admission (runtime facts)."""

    SUBMIT = "submit", "At submission"
    RUNTIME = "runtime", "At runtime (webhook)"


class Effect(models.TextChoices):
    PIN = "pin", "Pin to sites"
    REQUIRE_LABELS = "require_labels", "Require site labels"
    REQUIRE_CAPABILITIES = "require_capabilities", "Require capabilities"
    EXCLUDE = "exclude", "Exclude sites"
    PREFER_DATA_LOCALITY = "prefer_data_locality", "Prefer data locality"
    PREFER_FREE_CAPACITY = "prefer_free_capacity", "Prefer free capacity"
