"""A copy whose relay is lost moves to a second relay. The demo fleet has one relay between
site-a and site-c (site-b); this stack adds site-d, which also reads site-a's repository and
which site-c also reads, over slower links, so site-b is chosen first and site-d only when
site-b is lost."""

from __future__ import annotations

import copy
import hashlib
import random
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import User

from placement import labels
from portal import services, tasks
from portal.models import PlacementDecision
from sandbox.fleet import DEMO_FLEET
from sites.models import Site, SiteLink
from tests.fixtures_stack import Stack, quiet_stacks, running_stack, stack_for_test, wait_for
from tests.integration.test_transfers import stop
from tests.live_sessions import finished_run, units
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

SIZE = 96 * 2**20  # long enough a copy to lose its relay while it runs
SEED = 7

WRITE = {
    "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.bin"}]},
    "script": {
        "image": "python:3",
        "command": ["python3"],
        "source": f"import random; open('/tmp/out.bin', 'wb').write("
        f"random.Random({SEED}).randbytes({SIZE}))",
    },
}
READ_ON_GPU = {
    "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in.bin"}]},
    "script": {
        "image": "python:3",
        "command": ["python3"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "source": "import hashlib; print(hashlib.sha256(open('/tmp/in.bin', 'rb').read())"
        ".hexdigest())",
    },
}


def two_relay_fleet() -> dict[str, Any]:
    """The demo fleet with site-d: a second site that reads site-a's repository and that
    site-c reads (every site reads site-d's repository, and site-d every other's)."""
    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    by_name = {s["name"]: s for s in fleet["sites"]}
    seed = by_name["site-a"]["artifacts"].get("seed")
    if seed:
        by_name["site-a"]["artifacts"]["seed"] = str(DEMO_FLEET.parent / seed)
    site_d = copy.deepcopy(by_name["site-b"])
    site_d.update(name="site-d", zone="eu-west-1c", bucket="site-d-artifacts")
    site_d["artifacts"].update(
        endpoint="s3.site-d.sandbox.invalid",
        credentialsSecret="site-d-artifacts-credentials",
        readableFrom=["site-a", "site-b", "site-c"],
    )
    for other in ("site-a", "site-b", "site-c"):
        by_name[other]["artifacts"]["readableFrom"].append("site-d")
    fleet["sites"].append(site_d)
    return fleet


@pytest.fixture(scope="module")
def two_relay_stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    live_server: Any,
) -> Iterator[Stack]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    path = tmp_path_factory.mktemp("two-relays") / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_relay_fleet()))
    with running_stack(
        tmp_path_factory, django_db_blocker, live_server, resync=True, execute=True, fleet=path
    ) as s:
        yield s


def site_d_in_the_inventory(stack: Stack) -> None:
    """What site-d's operators declare: its repository, its links (slower than site-b's,
    every repository reachable both ways) and its credential Secret, propagated to it only."""
    site = wait_for(lambda: Site.objects.filter(name="site-d").first(), 30, "site-d synced")
    repo = stack.sandbox.repositories()["site-d"]
    site.overrides = {
        "artifact_store": {
            "endpoint": "s3.site-d.sandbox.invalid",
            "bucket": "site-d-artifacts",
            "region": "eu-west",
            "credentials_secret": "site-d-artifacts-credentials",
            "proxy": repo["url"],
        }
    }
    site.save()
    for other in Site.objects.exclude(name="site-d"):
        for source, target in ((other, site), (site, other)):
            SiteLink.objects.update_or_create(
                source=source,
                target=target,
                defaults={"bandwidth_mbps": 500, "cost_per_gb": "0.00", "latency_ms": 20},
            )
    label = labels.key(settings.PORTAL_LABEL_DOMAIN, labels.ARTIFACT_CREDENTIALS)
    stack.sandbox.request(
        "POST",
        f"/api/v1/namespaces/{settings.KARMADA_NAMESPACE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "site-d-artifacts-credentials", "labels": {label: "true"}},
            "stringData": {"accessKey": "demo-site-d", "secretKey": "demo-site-d-secret"},
        },
    )
    tasks.sites_sync()


@pytest.fixture
def live_two_relays(
    two_relay_stack: Stack, transactional_db: Any, settings: Any
) -> Iterator[Stack]:
    with stack_for_test(two_relay_stack, settings) as s:
        site_d_in_the_inventory(s)
        yield s
    # Before the database is emptied for the next test: this stack's watcher and beat would
    # sync site-d into it again, and the next module's fleet would hold a site it never had.
    quiet_stacks()


def test_a_copy_whose_relay_is_lost_mid_copy_moves_to_the_second_relay(
    live_two_relays: Stack,
) -> None:
    scientist = User.objects.get(username="scientist")
    helpers.pin("write", "site-a")
    body = helpers.write_then_read(WRITE, READ_ON_GPU)
    run = services.run_submit(user=scientist, body=body, project="eo-demo")
    fault = None
    try:
        wait_for(
            lambda: (u := units(run.pk).get("write-copy-site-b")) and u.phase == "Running" and u,
            180,
            "the copy to run at site-b",
        )
        fault = live_two_relays.sandbox.fault("site-not-ready", site="site-b")
        done = finished_run(run.pk, 300)
    finally:
        stop(run.pk, scientist)
        if fault:
            live_two_relays.sandbox.clear_fault(fault["id"])
    got = units(run.pk)
    assert done.status == "Succeeded", (done.message, {n: u.message for n, u in got.items()})
    copy_unit, read = got["write-copy-site-b"], got["read"]
    # Placed again at site-d, as a second attempt of the same copy.
    assert (copy_unit.site, copy_unit.attempt, copy_unit.phase) == ("site-d", 2, "Succeeded")
    first, second = PlacementDecision.objects.filter(unit=copy_unit).order_by("attempt", "id")
    assert (first.site, first.attempt, second.site, second.attempt) == ("site-b", 1, "site-d", 2)
    assert "failover from site-b" in second.reason, second.reason
    assert "relay site-d: it reads the producer's repository and the reader reads it" in (
        second.reason
    )
    # The reader read the copy at site-d: every byte the writer wrote.
    assert read.site == "site-c"
    expected = hashlib.sha256(random.Random(SEED).randbytes(SIZE)).hexdigest()
    assert read.outputs["result"] == expected
    step = next(
        w for w in live_two_relays.workflows(run.pk) if w["metadata"]["name"] == read.workflow_name
    )
    (argument,) = step["spec"]["arguments"]["artifacts"]
    assert argument["http"]["url"].startswith("http://s3.site-d.sandbox.invalid/site-d-artifacts/")
