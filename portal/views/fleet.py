"""The fleet pages: every site's state and capacity, one site, cordoning."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from placement.revisions.selectors import revisions_list
from portal.choices import UnitPhase
from portal.models import UnitRun
from portal.quotas import overview as quota_overview
from portal.quotas import quantities
from portal.selectors import runs_visible_to
from portal.views.common import UNITS_PER_PAGE, fleet_colours, is_htmx, page_of
from sites.models import Site, SiteLink
from sites.permissions import can_operate_site
from sites.selectors import dataset_list_visible
from sites.services import site_set_cordoned


def _running_by_site(request: HttpRequest) -> dict[str, list[UnitRun]]:
    """The running units the user may see, by site (at most a few per site)."""
    visible = runs_visible_to(request.user).values("pk")
    units = (
        UnitRun.objects.filter(phase=UnitPhase.RUNNING, run__in=visible)
        .exclude(site="")
        .select_related("run")
        .order_by("site", "started_at", "id")
    )
    by_site: dict[str, list[UnitRun]] = defaultdict(list)
    for u in units[:500]:
        by_site[u.site].append(u)
    return by_site


def _running_counts() -> dict[str, int]:
    rows = (
        UnitRun.objects.filter(phase=UnitPhase.RUNNING)
        .exclude(site="")
        .values("site")
        .annotate(n=Count("pk"))
    )
    return {r["site"]: r["n"] for r in rows}


def _pct(used: int, total: int) -> int:
    return min(100, round(100 * used / total)) if total > 0 else 0


@dataclass
class SiteRow:
    site: Site
    colour: str
    cpu_pct: int
    memory_pct: int
    gpu_pct: int
    running: int
    my_units: list[UnitRun]


def _site_rows(request: HttpRequest, sites: Iterable[Site]) -> list[SiteRow]:
    colours = fleet_colours()
    counts = _running_counts()
    mine = _running_by_site(request)
    return [
        SiteRow(
            site=s,
            colour=colours.get(s.name, "#fff"),
            cpu_pct=_pct(s.cpu_allocated, s.cpu_allocatable),
            memory_pct=_pct(s.memory_allocated, s.memory_allocatable),
            gpu_pct=_pct(s.gpu_allocated, s.gpu_allocatable),
            running=counts.get(s.name, 0),
            my_units=mine.get(s.name, [])[:5],
        )
        for s in sites
    ]


@login_required
@require_GET
def fleet(request: HttpRequest) -> HttpResponse:
    sites = list(Site.objects.all())
    rows = _site_rows(request, sites)
    if is_htmx(request):
        return render(request, "portal/htmx/fleet_sites.html", {"rows": rows})
    # The API's selector: the page shows exactly the datasets the API would list for this user.
    datasets = list(dataset_list_visible(request.user).order_by("name"))
    replicas = [
        {
            "dataset": d,
            "by_site": [
                next((r for r in d.replicas.all() if r.site_id == s.pk), None) for s in sites
            ],
        }
        for d in datasets
    ]
    from portal.controller.sync import policy_errors

    context = {
        "rows": rows,
        "fleet_policy_error": policy_errors().get("", ""),
        "sites": sites,
        "colours": fleet_colours(),
        "replicas": replicas,
        # The audit trail of the placement configuration: the newest revisions.
        "revisions": list(revisions_list()[:10]),
        "quota_rows": quota_bars(),
    }
    return render(request, "portal/fleet.html", context)


def _quota_pct(used: int, total: int) -> int:
    """Of a quota: a project holding something of a zero quota (borrowed) is full."""
    return _pct(used, total) if total else (100 if used else 0)


def quota_bars() -> list[dict[str, Any]]:
    """Each quota with what its project holds, as the fleet page's bars (issue 32)."""
    out = []
    for row in quota_overview.quota_rows():
        q, used = row["quota"], row["used"]
        name = f"{q.project.name} at {row['where']}"
        out.append(
            {
                "site": row["where"],
                "project": q.project.name,
                "cpu": quantities.cpu_text(q.cpu_millicores),
                "cpu_used": quantities.cpu_text(used.cpu),
                "cpu_pct": _quota_pct(used.cpu, q.cpu_millicores),
                "cpu_label": f"CPU quota of {name}",
                "memory": quantities.memory_text(q.memory_bytes),
                "memory_used": quantities.memory_text(used.memory),
                "memory_pct": _quota_pct(used.memory, q.memory_bytes),
                "memory_label": f"memory quota of {name}",
                # Neither set nor held: "none", as for GPUs, rather than a bar of 0 of 0.
                "memory_shown": bool(q.memory_bytes or used.memory),
                "gpu": q.gpus,
                "gpu_used": used.gpu,
                "gpu_pct": _quota_pct(used.gpu, q.gpus),
                "gpu_label": f"GPU quota of {name}",
                "queued": row["queued"],
            }
        )
    return out


def _get_site(name: str) -> Site:
    try:
        return Site.objects.get(name=name)
    except Site.DoesNotExist:
        raise Http404("No such site.") from None


@login_required
@require_GET
def site_detail(request: HttpRequest, name: str) -> HttpResponse:
    site = _get_site(name)
    row = _site_rows(request, [site])[0]
    visible = runs_visible_to(request.user).values("pk")
    running = (
        UnitRun.objects.filter(site=site.name, phase=UnitPhase.RUNNING, run__in=visible)
        .select_related("run")
        .order_by("started_at", "id")
    )
    links = SiteLink.objects.filter(Q(source=site) | Q(target=site)).select_related(
        "source", "target"
    )
    context = {
        "site": site,
        "row": row,
        "running_page": page_of(request, running, UNITS_PER_PAGE),
        "links_out": [lk for lk in links if lk.source_id == site.pk],
        "links_in": [lk for lk in links if lk.target_id == site.pk],
        "replicas": site.replicas.filter(
            dataset__in=dataset_list_visible(request.user).values("pk")
        )
        .select_related("dataset")
        .order_by("dataset__name"),
        "can_cordon": can_operate_site(request.user, site),
        "colours": fleet_colours(),
    }
    return render(request, "portal/site_detail.html", context)


@login_required
@require_POST
def site_cordon(request: HttpRequest, name: str) -> HttpResponseBase:
    """Cordon (``cordoned=1``) or uncordon (``cordoned=0``): the site's operators and staff."""
    site = _get_site(name)
    if not can_operate_site(request.user, site):
        raise PermissionDenied("Only the site's operators and fleet staff may cordon it.")
    value = request.POST.get("cordoned")
    if value not in ("0", "1"):
        messages.error(request, "Say cordoned=1 or cordoned=0.")
        return redirect("ui-site-detail", name=site.name)
    cordoned = value == "1"
    changed = site_set_cordoned(site=site, cordoned=cordoned, user=request.user)
    word = "cordoned" if cordoned else "uncordoned"
    messages.success(
        request, f"{site.name} {word}." if changed else f"{site.name} was already {word}."
    )
    return redirect("ui-site-detail", name=site.name)
