"""What the page benchmarks that render in this process share (``bench_ui``, ``bench_live``):
Django set up on import, a throw-away test database, a timer, and the table of figures
beside the floor. A helper, not a benchmark: ``make bench`` runs only ``bench_*.py``.

Import it first (``from tests.bench import inprocess``, the repository root on ``sys.path``):
it sets Django up with the settings the benchmarks render with.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("STATIC_MANIFEST", "0")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402


@contextmanager
def throwaway_database() -> Iterator[str]:
    """``test_<name>`` of whatever ``DATABASE_URL`` points at (SQLite in memory without one),
    created and migrated now and removed afterwards; its name."""
    setup_test_environment()
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        yield db_name
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)


def timed(
    fn: Callable[[], Any], repeat: int, before: Callable[[], Any] = lambda: None
) -> tuple[float, float]:
    """Median and max of ``repeat`` calls of ``fn``, each after an untimed ``before``."""
    before()
    fn()  # warm up (template loading, first queries)
    samples = []
    for _ in range(repeat):
        before()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), max(samples)


def print_rows(rows: list[tuple[str, float, float]], floor: float) -> None:
    """One line per ``(label, median, max)``, with the median as a multiple of ``floor``."""
    width = max(len(r[0]) for r in rows)
    for label, median, worst in rows:
        ratio = median / floor if floor else float("inf")
        print(
            f"  {label:<{width}}  {median * 1000:8.1f} ms  (max {worst * 1000:7.1f} ms, "
            f"{ratio:5.1f}x floor)"
        )
