"""The quota gate of the advance: which ready units of a run may be pushed to Karmada now."""

from __future__ import annotations

from collections.abc import Sequence

from portal.choices import UnitKind, UnitTiming
from portal.models import UnitRun, WorkflowRun
from portal.quotas.runtime import admit_runtime
from portal.quotas.scopes import governed, governed_sites, groups
from portal.quotas.submitted import admit_at


def admit(
    run: WorkflowRun, ready: Sequence[UnitRun], units: Sequence[UnitRun] = ()
) -> list[UnitRun]:
    """The units of ``ready`` that their project's quota lets start now; the others are
    queued (a ``Workload`` with why) and stay Pending without a step workflow. A unit placed
    at run time is admitted for the eligible sites where its project's quotas have room, and
    the webhook then chooses among those only; over quota at every eligible site it is queued.
    Units of a run without a project, of a site where its project has no quota, and exit
    handlers pass as they are. ``units``: every unit of the run (a runtime unit's eligible
    sites depend on where its upstream ran)."""
    if not ready or run.project_id is None or not governed():
        return list(ready)
    all_groups = groups()
    quota_sites = governed_sites(int(run.project_id), all_groups)
    if not quota_sites:
        return list(ready)
    by_site: dict[str, list[UnitRun]] = {}
    runtime: list[UnitRun] = []
    passed: list[UnitRun] = []
    for u in ready:
        if u.kind == UnitKind.EXIT:
            passed.append(u)
        elif u.timing == UnitTiming.SUBMIT and u.site in quota_sites:
            by_site.setdefault(u.site, []).append(u)
        elif u.timing == UnitTiming.RUNTIME and not u.site:
            runtime.append(u)
        else:
            passed.append(u)
    if not by_site and not runtime:
        return passed
    admitted: set[int] = set()
    for site in sorted(by_site):
        admitted |= admit_at(run, site, by_site[site])
    if runtime:
        admitted |= admit_runtime(run, runtime, units or ready, quota_sites, all_groups)
    return [u for u in ready if u.pk in admitted or u in passed]
