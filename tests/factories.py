"""factory_boy factories for the models; add one per model as the project grows.

Sequences keep names unique and valid (DNS labels for sites and projects), so any number of
objects can be made in one test without collisions.
"""

from __future__ import annotations

from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone
from factory.django import DjangoModelFactory

from placement.choices import Effect, Timing
from placement.models import PlacementRule
from portal.choices import DecisionSource, RunStatus, UnitPhase, UnitTiming
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.choices import ReplicaState, SyncMode
from sites.models import Dataset, DatasetReplica, Project, Site, SiteLink

User = get_user_model()
# Every user the factory makes can log in with it (the browser tests do).
PASSWORD = "pw"


class UserFactory(DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def groups(self, create: bool, extracted, **kwargs) -> None:
        if create and extracted:
            self.groups.add(*extracted)

    @classmethod
    def _after_postgeneration(cls, instance, create, results=None) -> None:
        if create:
            instance.save()


class ProjectFactory(DjangoModelFactory):
    class Meta:
        model = Project
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"project-{n}")
    description = ""

    @factory.post_generation
    def members(self, create: bool, extracted, **kwargs) -> None:
        if create and extracted:
            self.members.add(*extracted)


class SiteFactory(DjangoModelFactory):
    class Meta:
        model = Site
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"site-{n}")
    region = "eu-west"
    zone = factory.LazyAttribute(lambda s: f"{s.region}-a")
    provider = "onprem"
    labels = factory.LazyFunction(dict)
    capabilities = factory.LazyFunction(list)
    sync_mode = SyncMode.PUSH
    ready = True
    cordoned = False
    cpu_allocatable = 64_000
    cpu_allocated = 16_000
    memory_allocatable = 256 * 2**30
    memory_allocated = 64 * 2**30
    gpu_allocatable = 0
    gpu_allocated = 0
    pods_allocatable = 110
    pods_allocated = 10

    @factory.post_generation
    def operators(self, create: bool, extracted, **kwargs) -> None:
        if create and extracted:
            self.operators.add(*extracted)


class SiteLinkFactory(DjangoModelFactory):
    class Meta:
        model = SiteLink

    source = factory.SubFactory(SiteFactory)
    target = factory.SubFactory(SiteFactory)
    bandwidth_mbps = 10_000.0
    cost_per_gb = 0
    latency_ms = 5.0


class DatasetFactory(DjangoModelFactory):
    class Meta:
        model = Dataset

    name = factory.Sequence(lambda n: f"dataset-{n}")
    uri_prefix = factory.LazyAttribute(lambda d: f"s3://data/{d.name}/")
    bytes = 10 * 2**30
    format = "zarr"
    residency = factory.LazyFunction(list)
    project = None


class DatasetReplicaFactory(DjangoModelFactory):
    class Meta:
        model = DatasetReplica

    dataset = factory.SubFactory(DatasetFactory)
    site = factory.SubFactory(SiteFactory)
    uri = factory.LazyAttribute(lambda r: f"s3://{r.site.name}/{r.dataset.name}/")
    bytes = factory.LazyAttribute(lambda r: r.dataset.bytes)
    state = ReplicaState.READY


class PlacementRuleFactory(DjangoModelFactory):
    class Meta:
        model = PlacementRule

    name = factory.Sequence(lambda n: f"rule-{n}")
    order = factory.Sequence(lambda n: 100 + n)
    enabled = True
    selector = factory.LazyFunction(dict)
    timing = Timing.SUBMIT
    effect = Effect.PREFER_FREE_CAPACITY
    parameters = factory.LazyFunction(dict)
    weight = 1.0


RUN_ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)
UNIT_WAITING = (UnitPhase.PENDING,)
UNIT_OPEN = (UnitPhase.PENDING, UnitPhase.RUNNING)


class WorkflowRunFactory(DjangoModelFactory):
    """A run as the dashboard shows it; by default running for three minutes. Its units come
    from ``UnitRunFactory``; nothing here goes through submission or the planner."""

    class Meta:
        model = WorkflowRun

    name = factory.Sequence(lambda n: f"eo-pipeline-{n:05d}")
    project = None
    owner = factory.SubFactory(UserFactory)
    manifest = factory.LazyFunction(lambda: {"kind": "Workflow"})
    status = RunStatus.RUNNING
    started_at = factory.LazyAttribute(
        lambda r: None if r.status == RunStatus.PENDING else timezone.now() - timedelta(minutes=3)
    )
    finished_at = factory.LazyAttribute(lambda r: timezone.now() if r.status in RUN_ENDED else None)


class UnitRunFactory(DjangoModelFactory):
    """A unit of a run; ``site`` is the ``planned_site`` once it has started, and its times
    follow its phase."""

    class Meta:
        model = UnitRun

    run = factory.SubFactory(WorkflowRunFactory)
    name = factory.Sequence(lambda n: f"unit-{n:05d}")
    slug = factory.LazyAttribute(lambda u: u.name[:40])
    template = factory.LazyAttribute(lambda u: u.name.split("-")[0])
    position = 0
    upstream = factory.LazyFunction(list)
    depends = factory.LazyAttribute(lambda u: " && ".join(u.upstream))
    timing = UnitTiming.SUBMIT
    planned_site = "site-a"
    phase = UnitPhase.PENDING
    site = factory.LazyAttribute(lambda u: "" if u.phase in UNIT_WAITING else u.planned_site)
    reason = factory.LazyAttribute(lambda u: f"{u.name} goes to {u.planned_site}")
    started_at = factory.LazyAttribute(
        lambda u: None
        if u.phase in UNIT_WAITING
        else timezone.now() - timedelta(seconds=170 - u.later_by)
    )
    finished_at = factory.LazyAttribute(
        lambda u: None
        if u.phase in UNIT_OPEN
        else timezone.now() - timedelta(seconds=60 - u.later_by)
    )

    class Params:
        # Seconds after the default times: units of one run spread over its timeline.
        later_by = 0


class PlacementDecisionFactory(DjangoModelFactory):
    """A rule's decision for a unit, at the unit's planned site."""

    class Meta:
        model = PlacementDecision

    unit = factory.SubFactory(UnitRunFactory)
    run = factory.LazyAttribute(lambda d: d.unit.run)
    source = DecisionSource.RULE
    site = factory.LazyAttribute(lambda d: d.unit.planned_site)
    reason = factory.LazyAttribute(lambda d: f"{d.unit.name}: best score at {d.site}")
    candidates = factory.LazyFunction(list)


# Keys already made in this test session, by token row: a key is shown only once, so a test
# that needs a user's key twice (two clients) gets the same one back instead of replacing it.
_KEYS_BY_TOKEN: dict[int, str] = {}


def api_key(user: User) -> str:
    """``user``'s API key: the one made earlier for its current token, or a new one."""
    from portal.api_tokens import api_token_create
    from portal.models import ApiToken

    token = ApiToken.objects.filter(user=user).first()
    if token is not None and token.pk in _KEYS_BY_TOKEN:
        return _KEYS_BY_TOKEN[token.pk]
    key = api_token_create(user=user, replace=True)
    _KEYS_BY_TOKEN[ApiToken.objects.get(user=user).pk] = key
    return key
