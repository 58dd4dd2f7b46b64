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


class RevisionState(models.TextChoices):
    """A rule revision's state. Transitions (``REVISION_TRANSITIONS``, read only by
    ``placement.revisions.services``): draft → approved | rejected | applied (review off);
    approved → applied | rejected; applied → superseded (a later revision applied)."""

    DRAFT = "draft", "Draft"
    APPROVED = "approved", "Approved"
    APPLIED = "applied", "Applied"
    REJECTED = "rejected", "Rejected"
    SUPERSEDED = "superseded", "Superseded"


REVISION_TRANSITIONS: dict[str, frozenset[str]] = {
    RevisionState.DRAFT: frozenset(
        {RevisionState.APPROVED, RevisionState.REJECTED, RevisionState.APPLIED}
    ),
    RevisionState.APPROVED: frozenset({RevisionState.APPLIED, RevisionState.REJECTED}),
    RevisionState.APPLIED: frozenset({RevisionState.SUPERSEDED}),
    RevisionState.REJECTED: frozenset(),
    RevisionState.SUPERSEDED: frozenset(),
}
