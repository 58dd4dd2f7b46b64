from django.db import models

from placement.choices import Timing


class RunStatus(models.TextChoices):
    """Status of a workflow run.

    Allowed transitions (only services in ``portal.services`` change it):
      Pending  -> Running | Failed | Error | Stopped
      Running  -> Succeeded | Failed | Error | Stopped
      Failed   -> Running   (retry of the failed units)
      Error    -> Running   (retry)
    Succeeded and Stopped are final; resubmit makes a new run.
    """

    PENDING = "Pending", "Pending"
    RUNNING = "Running", "Running"
    SUCCEEDED = "Succeeded", "Succeeded"
    FAILED = "Failed", "Failed"
    ERROR = "Error", "Error"
    STOPPED = "Stopped", "Stopped"


RUN_TRANSITIONS: dict[str, set[str]] = {
    RunStatus.PENDING: {RunStatus.RUNNING, RunStatus.FAILED, RunStatus.ERROR, RunStatus.STOPPED},
    RunStatus.RUNNING: {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.ERROR, RunStatus.STOPPED},
    RunStatus.FAILED: {RunStatus.RUNNING},
    RunStatus.ERROR: {RunStatus.RUNNING},
    RunStatus.SUCCEEDED: set(),
    RunStatus.STOPPED: set(),
}


class UnitPhase(models.TextChoices):
    """Phase of one placement unit (one step workflow per attempt).

    Allowed transitions:
      Pending  -> Running | Succeeded | Failed | Error | Skipped | Omitted
      Running  -> Succeeded | Failed | Error | Pending (failover: a new attempt elsewhere)
      Failed   -> Pending (retry: a new attempt)
      Error    -> Pending (retry or failover)
    Succeeded, Skipped and Omitted are final. Skipped: its ``when`` was false; Omitted: its
    ``depends`` can no longer be satisfied.
    """

    PENDING = "Pending", "Pending"
    RUNNING = "Running", "Running"
    SUCCEEDED = "Succeeded", "Succeeded"
    FAILED = "Failed", "Failed"
    ERROR = "Error", "Error"
    SKIPPED = "Skipped", "Skipped"
    OMITTED = "Omitted", "Omitted"


UNIT_TRANSITIONS: dict[str, set[str]] = {
    UnitPhase.PENDING: {
        UnitPhase.RUNNING,
        UnitPhase.SUCCEEDED,
        UnitPhase.FAILED,
        UnitPhase.ERROR,
        UnitPhase.SKIPPED,
        UnitPhase.OMITTED,
    },
    UnitPhase.RUNNING: {UnitPhase.SUCCEEDED, UnitPhase.FAILED, UnitPhase.ERROR, UnitPhase.PENDING},
    UnitPhase.FAILED: {UnitPhase.PENDING},
    UnitPhase.ERROR: {UnitPhase.PENDING},
    UnitPhase.SUCCEEDED: set(),
    UnitPhase.SKIPPED: set(),
    UnitPhase.OMITTED: set(),
}


class DecisionSource(models.TextChoices):
    RULE = "rule", "Rule at submission"
    WEBHOOK = "webhook", "Admission webhook"
    FALLBACK = "fallback", "Fallback policy"
    FAILOVER = "failover", "Failover"


# A unit is placed when its rule says: the same choice set as the rules' timing.
UnitTiming = Timing
