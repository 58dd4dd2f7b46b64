"""Dashboard benchmark: server render time of the run page for a 2,000-unit run,
beside a floor measured in the same run (the empty runs list: login, session, base template).

Run: ``.venv/bin/python tests/bench/bench_ui.py``. It creates a throw-away test database
(``test_<name>`` of whatever ``DATABASE_URL`` points at; SQLite in memory without one) and
removes it afterwards. Target: the run page of 2,000 units in at most 1 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# First: it sets Django up.
from tests.bench.inprocess import print_rows, throwaway_database, timed  # noqa: E402

# isort: split
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

UNITS = 2000
REPEAT = 7
TARGET_S = 1.0


def main() -> None:
    with throwaway_database() as db_name:
        from tests.factories import SiteFactory, UserFactory
        from tests.portal.helpers import chain_units, make_run

        for name in ("site-a", "site-b", "site-c"):
            SiteFactory(name=name)
        user = UserFactory(username="bench")
        client = Client()
        client.force_login(user)

        def get(url: str) -> None:
            response = client.get(url)
            assert response.status_code == 200, response.status_code
            assert len(response.content) > 0

        floor, floor_max = timed(lambda: get(reverse("ui-run-list")), REPEAT)
        rows = [("empty runs list (floor)", floor, floor_max)]

        # Layered: 50 layers of 40 units, half done, each with a decision of 3 candidates.
        layered = make_run(user, units=chain_units(UNITS, width=40))
        # Wide: one root fanning out to 1,998 units joined by one sink (the hard case for the
        # ordering sweeps and for the browser: one very tall layer).
        wide_units = [("root", "site-a", "Succeeded", [])]
        wide_units += [
            (f"w{i:04d}", ("site-a", "site-b", "site-c")[i % 3], "Running", ["root"])
            for i in range(UNITS - 2)
        ]
        wide_units.append(("sink", "site-c", "Pending", [f"w{i:04d}" for i in range(UNITS - 2)]))
        wide = make_run(user, units=wide_units)
        for label, run in (("layered", layered), ("fan-out/fan-in", wide)):
            assert run.units.count() == UNITS
            page = timed(lambda r=run: get(reverse("ui-run-detail", args=[r.pk])), REPEAT)
            live = timed(lambda r=run: get(reverse("ui-run-live", args=[r.pk])), REPEAT)
            rows.append((f"run page, {UNITS} units, {label}", *page))
            rows.append((f"live partial, {UNITS} units, {label}", *live))

        size = len(client.get(reverse("ui-run-detail", args=[layered.pk])).content)
        print(f"database: {connection.vendor} ({db_name}); median and max of {REPEAT} renders")
        print_rows(rows, floor)
        page_worst = max(m for label, m, _ in rows if label.startswith("run page"))
        verdict = "OK" if page_worst <= TARGET_S else "OVER TARGET"
        print(
            f"  run page HTML: {size / 1024:.0f} KiB; target <= {TARGET_S:.1f} s: "
            f"{page_worst * 1000:.0f} ms {verdict}"
        )


if __name__ == "__main__":
    main()
