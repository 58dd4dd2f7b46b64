from django.db import models

from placement.choices import Timing


class RunStatus(models.TextChoices):
    """Status of a workflow run.

    Allowed transitions: ``RUN_TRANSITIONS``, which ``portal.state`` (the only writer)
    consults. Succeeded and Stopped are final; resubmit makes a new run.
    """

    PENDING = "Pending", "Pending"
    RUNNING = "Running", "Running"
    SUCCEEDED = "Succeeded", "Succeeded"
    FAILED = "Failed", "Failed"
    ERROR = "Error", "Error"
    STOPPED = "Stopped", "Stopped"


RUN_TRANSITIONS: dict[str, set[str]] = {
    # Pending -> Succeeded: every unit ended without a step workflow (all skipped by ``when``).
    RunStatus.PENDING: {
        RunStatus.RUNNING,
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.ERROR,
        RunStatus.STOPPED,
    },
    RunStatus.RUNNING: {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.ERROR, RunStatus.STOPPED},
    RunStatus.FAILED: {RunStatus.RUNNING},  # retry of the failed units
    RunStatus.ERROR: {RunStatus.RUNNING},  # retry
    RunStatus.SUCCEEDED: set(),
    RunStatus.STOPPED: set(),
}


class UnitKind(models.TextChoices):
    """What a unit runs (``UnitRun.kind``): the parser's three kinds, and the two units the
    controller adds to a run (its exit handler, and a relay copy of a producer's outputs).
    Written once, when the row is created; the phase logic reads it (an exit handler or a
    copy is no node of the entrypoint)."""

    TASK = "task", "DAG task"
    STEP = "step", "Step"
    WORKFLOW = "workflow", "Whole entrypoint"
    EXIT = "exit", "Exit handler"
    TRANSFER = "transfer", "Transfer (relay copy)"


# The kinds that are not one of the entrypoint's nodes.
AUX_KINDS = (UnitKind.EXIT, UnitKind.TRANSFER)


class UnitPhase(models.TextChoices):
    """Phase of one placement unit (one step workflow per attempt).

    Allowed transitions: ``UNIT_TRANSITIONS``, which ``portal.state`` (the only writer)
    consults. Skipped: its ``when`` was false (or its withParam gave no items); Omitted: its
    ``depends`` can no longer be satisfied, or the run was stopped before it started.

    A phase's sub-states are columns of the same row (``UnitRun``), each with one writer:

    * ``kind`` (``UnitKind``): set when the row is created, never moved.
    * ``expanded``: a withParam unit became a group row (Pending -> Running, in the same
      UPDATE, ``portal.controller.expand``); its items carry the work and it ends when they
      have (Running -> Succeeded or Failed). An expansion to no item leaves it False and
      moves the unit to Skipped.
    * ``shutdown_sent``: a stopped run's Running unit was sent its step workflow's
      ``spec.shutdown`` once (``portal.controller.status.shutdown``); the phase follows the
      step workflow.
    * unsubmitted: ``workflow_name == ""`` (no step workflow created yet for this attempt);
      placed: ``site`` (written only by ``portal.state.unit_place``). Waiting and the worker's
      claim are no unit states (``docs/decisions.md``).
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
        # Pending -> Pending: failover of a unit not started yet (a new attempt elsewhere).
        UnitPhase.PENDING,
        UnitPhase.RUNNING,
        UnitPhase.SUCCEEDED,
        UnitPhase.FAILED,
        UnitPhase.ERROR,
        UnitPhase.SKIPPED,
        UnitPhase.OMITTED,
    },
    UnitPhase.RUNNING: {
        UnitPhase.SUCCEEDED,
        UnitPhase.FAILED,
        UnitPhase.ERROR,
        UnitPhase.PENDING,  # failover: a new attempt elsewhere
        UnitPhase.SKIPPED,  # a withParam group whose value held no items
    },
    UnitPhase.FAILED: {UnitPhase.PENDING},  # retry: a new attempt
    UnitPhase.ERROR: {UnitPhase.PENDING},  # retry or failover
    UnitPhase.SUCCEEDED: set(),
    UnitPhase.SKIPPED: set(),
    UnitPhase.OMITTED: {UnitPhase.PENDING},  # retry: the units a failed one had blocked
}

# A unit in one of these has ended (for its run; retry may still start it again).
FINAL_UNIT = frozenset(
    {
        UnitPhase.SUCCEEDED,
        UnitPhase.FAILED,
        UnitPhase.ERROR,
        UnitPhase.SKIPPED,
        UnitPhase.OMITTED,
    }
)
# Runs that the worker still moves on.
ACTIVE_RUN = [RunStatus.PENDING, RunStatus.RUNNING]


class DecisionSource(models.TextChoices):
    RULE = "rule", "Rule at submission"
    WEBHOOK = "webhook", "Admission webhook"
    FALLBACK = "fallback", "Fallback policy"
    FAILOVER = "failover", "Failover"
    TRANSFER = "transfer", "Transfer (relay copy)"


# A unit is placed when its rule says: the same choice set as the rules' timing.
UnitTiming = Timing
