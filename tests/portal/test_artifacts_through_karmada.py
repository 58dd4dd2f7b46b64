"""Artifacts across sites: the reader would go to site-c (the
data it also reads is there) but site-c cannot reach site-a's artifact repository (the
sandbox's fleet says so, and the inventory's link says the same): it stays at site-c when a
relay can copy the output, and goes to site-b, which reads site-a, when none can."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal import services
from portal.choices import UnitPhase
from portal.controller.bindings import bindings_observe
from portal.controller.sync import policies_sync
from portal.karmada import client, lists, resources
from portal.models import PlacementDecision, UnitRun, WorkflowRun
from sites.models import Dataset, DatasetReplica, Site, SiteLink
from tests.fixtures_sandbox import SandboxServer
from tests.portal.helpers import READ_DATA, write_then_read
from tests.sandbox.execution import conftest as on_members
from tests.sandbox.execution.conftest import Member, needs_bwrap

executing = on_members.executing
site_b = on_members.site_b
site_c = on_members.site_c

pytestmark = [needs_bwrap]

CONTENT = "tiles from site-a:\nünïcode, $HOME and {{not-a-template}}"
SECRET = "site-a-artifacts-credentials"
D = "portal.multisite.io"


@pytest.fixture
def fleet(executing: SandboxServer, db: Any, settings: Any) -> SandboxServer:
    executing.reset()
    settings.KARMADA_KUBECONFIG = str(executing.kubeconfig)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    client.reset()
    call_command("load_demo", verbosity=0)
    # What site-a's operators set in the inventory: its repository, as the sandbox fleet has it.
    site = Site.objects.get(name="site-a")
    site.overrides = {
        **(site.overrides or {}),
        "artifact_store": {
            "endpoint": "s3.site-a.sandbox.invalid",
            "bucket": "site-a-artifacts",
            "credentials_secret": SECRET,
        },
    }
    site.save()
    # The fleet's fact: steps at site-c cannot reach site-a's repository.
    SiteLink.objects.filter(source__name="site-a", target__name="site-c").update(
        artifacts_reachable=False
    )
    # Data the reader also reads, held only at site-c: without the link it would go there.
    aux = Dataset.objects.create(name="aux-c", bytes=200 * 2**30)
    DatasetReplica.objects.create(dataset=aux, site=Site.objects.get(name="site-c"))
    policies_sync()
    return executing


def pipeline() -> str:
    return write_then_read(
        {
            # Reads the archive at site-a, so it runs there.
            "metadata": {"annotations": {f"{D}/datasets": "sentinel2-l1c"}},
            "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.txt"}]},
            "script": {
                "image": "python:3.12",
                "command": ["python3"],
                "source": f"open('/tmp/out.txt', 'w').write({CONTENT!r})",
            },
        },
        {
            # More CPU than site-a has at all: it must run elsewhere.
            **READ_DATA,
            "metadata": {"annotations": {f"{D}/datasets": "aux-c"}},
            "container": {**READ_DATA["container"], "resources": {"requests": {"cpu": "20"}}},
        },
        generate_name="reach-",
    )


def observe_until(sandbox: SandboxServer, unit: UnitRun) -> UnitRun:
    def ended() -> UnitRun | None:
        bindings_observe(lists.list_objects(resources.RESOURCE_BINDING)[0])
        u = UnitRun.objects.get(pk=unit.pk)
        return u if u.phase in (UnitPhase.SUCCEEDED, UnitPhase.FAILED, UnitPhase.ERROR) else None

    return sandbox.wait_for(ended, timeout=120, interval=0.2, what=f"{unit.name} to end")


def test_a_reader_that_cannot_reach_the_writers_repository_reads_through_a_relay(
    fleet: SandboxServer, site_b: Member, site_c: Member
) -> None:
    """The reader goes where its other data is (site-c) although site-c cannot read site-a's
    repository: site-b reads it and site-c reads site-b, so the plan counts on a copy at
    site-b (tests/integration/test_transfers.py runs it end to end)."""
    user = get_user_model().objects.get(username="scientist")
    run: WorkflowRun = services.run_submit(user=user, body=pipeline())
    write, read = run.units.get(name="write"), run.units.get(name="read")
    assert write.site == "site-a"
    assert read.site == "site-c", read.reason
    decision = PlacementDecision.objects.get(unit=read)
    why = {c["site"]: (c["eligible"], c["why"]) for c in decision.candidates}
    assert why["site-c"][0] is True
    assert "from site-a through a copy at site-b" in why["site-c"][1]
    # Where no site can relay (site-c reads no repository site-a's outputs could be copied
    # to), site-c is not a candidate and the reader goes to site-b, which reads site-a.
    SiteLink.objects.filter(source__name="site-b", target__name="site-c").update(
        artifacts_reachable=False
    )
    again: WorkflowRun = services.run_submit(user=user, body=pipeline())
    read = again.units.get(name="read")
    assert read.site == "site-b", read.reason
    decision = PlacementDecision.objects.get(unit=read)
    why = {c["site"]: (c["eligible"], c["why"]) for c in decision.candidates}
    assert why["site-c"] == (
        False,
        "cannot reach the artifact repository of site-a (upstream outputs) and no relay in "
        "eu-central, eu-west (residency of sentinel2-l1c)",
    )
