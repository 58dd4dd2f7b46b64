"""What a real transfer costs, on the live stack: the demo's site-c cannot
read site-a's repository, so a GPU step at site-c reading site-a's output reads a copy made at
site-b. The copy's cost is the bytes it reported times the site-a -> site-b link's
``cost_per_gb``, and the transfer unit in REST, the run's ``cost.transfer`` and the project's
usage rows agree to the cent."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal import services
from portal.models import UnitRun
from portal.quotas import metrics, usage
from portal.quotas.models import SitePrice
from sites.models import Site, SiteLink
from tests.fixtures_stack import Stack
from tests.integration.test_transfers import stop
from tests.live_sessions import finished_run
from tests.portal import helpers

pytestmark = [pytest.mark.integration]

# Incompressible, so the copy (a gzipped tarball, as Argo archives) moves about 64 KB.
WRITE = {
    "outputs": {"artifacts": [{"name": "data", "path": "/tmp/out.bin"}]},
    "script": {
        "image": "python:3",
        "command": ["python3"],
        "source": "import secrets; open('/tmp/out.bin', 'w').write(secrets.token_hex(32768))",
    },
}
READ_ON_GPU = {
    "inputs": {"artifacts": [{"name": "data", "path": "/tmp/in.bin"}]},
    "container": {
        "image": "alpine:3.23",
        "command": ["wc", "-c", "/tmp/in.bin"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    },
}
# Dear enough that 64 KB costs euros: the agreement is checked on cents that are not zero.
PER_GB = Decimal("123456.7891")


def test_a_real_transfer_costs_its_bytes_at_its_link_everywhere_to_the_cent(
    live_executing: Stack,
) -> None:
    scientist = User.objects.get(username="scientist")
    SiteLink.objects.filter(source__name="site-a", target__name="site-b").update(cost_per_gb=PER_GB)
    # A dearer link into site-b must not price a copy that came from site-a.
    SiteLink.objects.filter(source__name="site-c", target__name="site-b").update(
        cost_per_gb=PER_GB * 3
    )
    for site in Site.objects.all():
        SitePrice.objects.update_or_create(site=site, defaults={"cpu_hour": Decimal("1.00")})
    helpers.pin("write", "site-a")
    run = services.run_submit(
        user=scientist, body=helpers.write_then_read(WRITE, READ_ON_GPU), project="eo-demo"
    )
    try:
        done = finished_run(run.pk, 90)
    finally:
        stop(run.pk, scientist)
    assert done.status == "Succeeded", done.message
    copy = UnitRun.objects.get(run=run, name="write-copy-site-b")
    moved = usage.transfer_bytes(copy.outputs)
    assert moved is not None and moved > 32768  # it reported what it copied
    expected = usage.cents(Decimal(moved) / Decimal(10**9) * PER_GB)
    assert expected > Decimal("1.00")

    api = APIClient()
    api.force_authenticate(scientist)
    detail = api.get(f"/api/v1/runs/{run.pk}/").json()
    (shown,) = [u for u in detail["units"] if u["kind"] == "transfer"]
    assert (shown["transfer"]["from"], shown["transfer"]["to"]) == ("site-a", "site-b")
    assert shown["transfer"]["bytes"] == moved
    assert Decimal(shown["transfer"]["cost"]) == expected
    assert Decimal(detail["cost"]["transfer"]) == expected
    per_unit = usage.run_cost_panel(done, shown=1000)["unit_costs"]
    assert sum(Decimal(u["total"]) for u in per_unit) == Decimal(detail["cost"]["total"])

    body = api.get("/api/v1/usage/?project=eo-demo&group_by=run").json()
    (row,) = [r for r in body["rows"] if r["key"] == done.name]
    assert Decimal(row["transfer"]) == expected
    assert row["total"] == detail["cost"]["total"]
    assert row["bytes_by_link"] == {"site-a>site-b": moved}
    # The project's total for the period is the sum of its runs', to the cent.
    assert sum(Decimal(r["total"]) for r in body["rows"]) == Decimal(body["total"])
    assert sum(Decimal(r["transfer"]) for r in body["rows"]) == Decimal(body["transfer"])
    csv = api.get("/api/v1/usage/?project=eo-demo&group_by=run&export=csv").content.decode()
    header, *lines = csv.splitlines()
    column = header.split(",").index("bytes site-a>site-b")
    (line,) = [x.split(",") for x in lines if x.startswith(f"{done.name},")]
    assert line[column] == str(moved)

    metrics.refresh(force=True)
    text = api.get("/metrics").content.decode()
    transfer_at_b = [
        x
        for x in text.splitlines()
        if x.startswith('portal_cost_total{kind="transfer",project="eo-demo",site="site-b"}')
    ]
    assert transfer_at_b and Decimal(transfer_at_b[0].split()[-1]) >= expected
