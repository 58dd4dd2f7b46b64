from django.db import models


class SyncMode(models.TextChoices):
    PUSH = "Push", "Push"
    PULL = "Pull", "Pull"


class ReplicaState(models.TextChoices):
    """Lifecycle of a dataset copy at a site.

    Allowed transitions: Copying -> Ready | Failed; Ready -> Lost; Lost -> Copying;
    Failed -> Copying. Only Ready replicas count for data locality.
    """

    COPYING = "Copying", "Copying"
    READY = "Ready", "Ready"
    FAILED = "Failed", "Failed"
    LOST = "Lost", "Lost"
