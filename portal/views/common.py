"""What every page of the dashboard shares: HTMX detection, paging, the fleet's colours."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.paginator import Page, Paginator
from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from portal.dag import site_colours
from portal.models import WorkflowRun
from portal.selectors.fleet import site_names
from portal.selectors.runs import runs_listed, runs_listed_light

UNITS_PER_PAGE = 50


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def page_of(request: HttpRequest, items: Any, per_page: int, param: str = "page") -> Page[Any]:
    return Paginator(items, per_page).get_page(request.GET.get(param))


def get_run(request: HttpRequest, pk: int) -> WorkflowRun:
    """The run ``pk`` if the user may see it; a 404 otherwise (never a 403, which would
    confirm that it exists)."""
    return get_object_or_404(runs_listed(request.user), pk=pk)


def get_run_light(request: HttpRequest, pk: int) -> WorkflowRun:
    """``get_run`` without the run's manifest and compiled workflow (``runs_listed_light``):
    for the run page and its live partial, whose cost must not grow with the run."""
    return get_object_or_404(runs_listed_light(request.user), pk=pk)


def fleet_colours(extra: Iterable[str] = ()) -> dict[str, str]:
    """Colours for every site of the fleet (so a site keeps its colour on every page) and for
    any other name a run mentions."""
    return site_colours([*site_names(), *extra])


def legend(colours: dict[str, str], names: Iterable[str]) -> list[tuple[str, str]]:
    return [(n, colours[n]) for n in sorted(set(names)) if n in colours]
