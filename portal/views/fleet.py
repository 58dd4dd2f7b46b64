"""The fleet pages: every site's state and capacity, one site, cordoning."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from placement.revisions.selectors import revisions_list
from portal.models import UnitRun
from portal.quotas import overview as quota_overview
from portal.quotas import quantities
from portal.selectors.fleet import (
    policy_errors,
    replicas_by_site,
    running_by_site,
    running_counts,
    site_get,
    site_links,
    site_replicas_visible,
    site_running_units,
    sites_all,
)
from portal.views.common import UNITS_PER_PAGE, fleet_colours, is_htmx, page_of
from sites.models import Site
from sites.permissions import can_operate_site
from sites.services import site_set_cordoned


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
    counts = running_counts()
    mine = running_by_site(request.user)
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
    sites = sites_all()
    rows = _site_rows(request, sites)
    if is_htmx(request):
        return render(request, "portal/htmx/fleet_sites.html", {"rows": rows})
    context = {
        "rows": rows,
        "fleet_policy_error": policy_errors().get("", ""),
        "sites": sites,
        "colours": fleet_colours(),
        "replicas": replicas_by_site(request.user, sites),
        # The audit trail of the placement configuration: the newest revisions.
        "revisions": list(revisions_list()[:10]),
        "quota_rows": quota_bars(),
    }
    return render(request, "portal/fleet.html", context)


def _quota_pct(used: int, total: int) -> int:
    """Of a quota: a project holding something of a zero quota (borrowed) is full."""
    return _pct(used, total) if total else (100 if used else 0)


def quota_bars() -> list[dict[str, Any]]:
    """Each quota with what its project holds, as the fleet page's bars."""
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
        return site_get(name)
    except Site.DoesNotExist:
        raise Http404("No such site.") from None


@login_required
@require_GET
def site_detail(request: HttpRequest, name: str) -> HttpResponse:
    site = _get_site(name)
    row = _site_rows(request, [site])[0]
    links_out, links_in = site_links(site)
    context = {
        "site": site,
        "row": row,
        "running_page": page_of(request, site_running_units(request.user, site), UNITS_PER_PAGE),
        "links_out": links_out,
        "links_in": links_in,
        "replicas": site_replicas_visible(request.user, site),
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
