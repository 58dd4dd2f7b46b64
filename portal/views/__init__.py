"""Browser pages of the scientist's dashboard, server-rendered with HTMX partials.

Every page is ``login_required``; runs are looked up through ``runs_visible_to`` so a run the
user may not see is a 404, never a 403 that would confirm it exists. Writes go through the
service functions (``portal.services``, ``sites.services``), each called by name; views only
translate. ``runs``: the run pages and actions; ``submit``: the submit page; ``fleet``: sites.
"""

from portal.views.fleet import fleet, site_cordon, site_detail
from portal.views.runs import (
    run_cost_panel,
    run_decisions,
    run_detail,
    run_list,
    run_live,
    run_resubmit,
    run_resume,
    run_retry,
    run_stop,
)
from portal.views.submit import submit, submit_parameters, submit_preview
from portal.views.units import unit_logs, unit_output, unit_panel

# Kept for the URL name "home" that the foundation uses.
home = run_list

__all__ = [
    "fleet",
    "home",
    "run_cost_panel",
    "run_decisions",
    "run_detail",
    "run_list",
    "run_live",
    "run_resubmit",
    "run_resume",
    "run_retry",
    "run_stop",
    "site_cordon",
    "site_detail",
    "submit",
    "submit_parameters",
    "submit_preview",
    "unit_logs",
    "unit_output",
    "unit_panel",
]
