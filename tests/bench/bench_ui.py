"""Dashboard benchmark (issue 7): server render time of the run page for a 2,000-unit run,
beside a floor measured in the same run (the empty runs list: login, session, base template).

Run: ``.venv/bin/python tests/bench/bench_ui.py``. It creates a throw-away test database
(``test_<name>`` of whatever ``DATABASE_URL`` points at; SQLite in memory without one) and
removes it afterwards. Target: the run page of 2,000 units in at most 1 s.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("STATIC_MANIFEST", "0")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.urls import reverse  # noqa: E402

UNITS = 2000
REPEAT = 7
TARGET_S = 1.0


def timed(fn: Callable[[], Any], repeat: int = REPEAT) -> tuple[float, float]:
    fn()  # warm up (template loading, first queries)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), max(samples)


def main() -> None:
    setup_test_environment()
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
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

        floor, floor_max = timed(lambda: get(reverse("ui-run-list")))
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
            page = timed(lambda r=run: get(reverse("ui-run-detail", args=[r.pk])))
            live = timed(lambda r=run: get(reverse("ui-run-live", args=[r.pk])))
            rows.append((f"run page, {UNITS} units, {label}", *page))
            rows.append((f"live partial, {UNITS} units, {label}", *live))

        size = len(client.get(reverse("ui-run-detail", args=[layered.pk])).content)
        print(f"database: {connection.vendor} ({db_name}); median and max of {REPEAT} renders")
        width = max(len(r[0]) for r in rows)
        for label, median, worst in rows:
            ratio = median / floor if floor else float("inf")
            print(
                f"  {label:<{width}}  {median * 1000:8.1f} ms  (max {worst * 1000:7.1f} ms, "
                f"{ratio:5.1f}x floor)"
            )
        page_worst = max(m for label, m, _ in rows if label.startswith("run page"))
        verdict = "OK" if page_worst <= TARGET_S else "OVER TARGET"
        print(
            f"  run page HTML: {size / 1024:.0f} KiB; target <= {TARGET_S:.1f} s: "
            f"{page_worst * 1000:.0f} ms {verdict}"
        )
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)


if __name__ == "__main__":
    main()
