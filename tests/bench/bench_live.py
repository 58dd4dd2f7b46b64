"""Live page of a huge run: the cost of one poll of the run page's live partial, for a
10-unit and a 10,000-unit run in the same process, when something moved (200) and when nothing
did (304 to a conditional GET), and of the run page itself; beside the floor of the runs list.

Run: ``.venv/bin/python tests/bench/bench_live.py``. It creates a throw-away test database
(``test_<name>`` of whatever ``DATABASE_URL`` points at) and removes it afterwards; the runs
are stored directly (one bulk insert each), no fleet needed. Targets: the live partial of the
10,000-unit run at most 250 ms and about the same as the 10-unit run's; the run page at most
400 ms.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# First: it sets Django up.
from tests.bench.inprocess import print_rows, throwaway_database, timed  # noqa: E402

# isort: split
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

SIZES = (10, 10_000)
REPEAT = 9
TARGET_LIVE_S = 0.25
TARGET_PAGE_S = 0.4
SITES = ("site-a", "site-b", "site-c")


def poll_figures(
    get: Callable[..., Any], live: str, run: Any
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The poll after a unit moved (200), and the poll when nothing moved (304)."""
    from portal import state
    from portal.models import UnitRun

    mover = run.units.filter(phase="Pending", loop_task="fan").order_by("id")[0]
    etag = {"last": get(live)["ETag"]}

    def move() -> None:
        # One unit moves between two polls (the page holds the version before it): started,
        # then failed over (back to Pending), and so on.
        etag["last"] = get(live)["ETag"]
        unit = UnitRun.objects.get(pk=mover.pk)
        state.unit_move(unit, "Running" if unit.phase == "Pending" else "Pending")

    changed = timed(lambda: get(live, 200, if_none_match=etag["last"]), REPEAT, before=move)
    etag["last"] = get(live)["ETag"]
    unchanged = timed(lambda: get(live, 304, if_none_match=etag["last"]), REPEAT)
    return changed, unchanged


def main() -> None:
    with throwaway_database() as db_name:
        from tests.factories import SiteFactory, UserFactory
        from tests.portal.helpers import fan_out_run

        for name in SITES:
            SiteFactory(name=name)
        user = UserFactory(username="bench", is_staff=True)
        client = Client()
        client.force_login(user)

        def get(url: str, status: int = 200, **headers: str) -> Any:
            response = client.get(url, headers=headers)
            assert response.status_code == status, (url, response.status_code)
            return response

        floor = timed(lambda: get(reverse("ui-run-list")), REPEAT)
        rows: list[tuple[str, float, float]] = [("runs list (floor)", *floor)]
        runs = {n: fan_out_run(user, n) for n in SIZES}
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        for n, run in runs.items():
            live = reverse("ui-run-live", args=[run.pk])
            page = timed(lambda r=run: get(reverse("ui-run-detail", args=[r.pk])), REPEAT)
            changed, unchanged = poll_figures(get, live, run)
            rows.append((f"run page, {n} units", *page))
            rows.append((f"live partial, {n} units, a unit moved (200)", *changed))
            rows.append((f"live partial, {n} units, nothing moved (304)", *unchanged))
        print(f"database: {connection.vendor} ({db_name}); median and max of {REPEAT} requests")
        print("  (a shared, loaded machine: compare rows of this run, not across runs)")
        print_rows(rows, floor[0])
        by = {label: median for label, median, _ in rows}
        big, small = SIZES[-1], SIZES[0]
        live_big = by[f"live partial, {big} units, a unit moved (200)"]
        live_small = by[f"live partial, {small} units, a unit moved (200)"]
        page_big = by[f"run page, {big} units"]
        print(
            f"  live partial {big} units: {live_big * 1000:.0f} ms (target <= "
            f"{TARGET_LIVE_S * 1000:.0f} ms: {'OK' if live_big <= TARGET_LIVE_S else 'OVER'}), "
            f"{live_big / live_small:.2f}x the {small}-unit run"
        )
        print(
            f"  run page {big} units: {page_big * 1000:.0f} ms (target <= "
            f"{TARGET_PAGE_S * 1000:.0f} ms: {'OK' if page_big <= TARGET_PAGE_S else 'OVER'})"
        )


if __name__ == "__main__":
    main()
