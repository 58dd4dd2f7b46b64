"""The portal app's models, each family in its own module; imported here so that Django
registers them with this app and ``from portal.models import X`` reaches every one.

* ``runs``: what a scientist submitted (``WorkflowRun``) and its placement units (``UnitRun``);
* ``decisions``: why each unit went where it went, and the candidate tables decisions share;
* ``events``: a run's history;
* ``templates``: the catalogue of WorkflowTemplates runs may reference;
* ``locks``: Argo synchronization (places on locks, fleet-wide locks);
* ``logs``: the logs kept of an attempt's pods;
* ``tokens``: REST API tokens;
* ``portal.quotas.models``: the shared fleet (quotas, priority classes, the quota queue, prices).
"""

from portal.models.decisions import CandidateTable, PlacementDecision
from portal.models.events import RunEvent
from portal.models.fields import BULK_ROWS, InlineJSONField
from portal.models.locks import FleetLock, SyncHold
from portal.models.logs import KeptAttempt, KeptLog
from portal.models.runs import UnitRun, WorkflowRun
from portal.models.templates import WorkflowTemplate
from portal.models.tokens import ApiToken
from portal.quotas.models import (
    Budget,
    PriorityClass,
    ProjectDefaults,
    Quota,
    SitePrice,
    Workload,
)

__all__ = [
    "BULK_ROWS",
    "ApiToken",
    "Budget",
    "CandidateTable",
    "FleetLock",
    "InlineJSONField",
    "KeptAttempt",
    "KeptLog",
    "PlacementDecision",
    "PriorityClass",
    "ProjectDefaults",
    "Quota",
    "RunEvent",
    "SitePrice",
    "SyncHold",
    "UnitRun",
    "WorkflowRun",
    "WorkflowTemplate",
    "Workload",
]
