"""The shared fleet's documentation: the operator guide's "Quotas, priorities and prices" and the
scientist guide's "Why is my step queued?" and "What did my run cost?" exist, and the operator
guide names every Prometheus figure ``/metrics`` exports for a shared fleet, as exported."""

from __future__ import annotations

import re
from pathlib import Path

from portal.quotas import metrics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def section(path: Path, heading: str) -> str:
    text = path.read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, f"{path.name} has no section {heading!r}"
    return match.group(1)


def test_the_guides_have_the_issues_sections() -> None:
    queued = section(DOCS / "scientist-guide.md", "Why is my step queued?")
    assert "Queued" in queued and "position" in queued and "Priority" in queued
    cost = section(DOCS / "scientist-guide.md", "What did my run cost?")
    assert "Cost" in cost and "transfer" in cost and "/api/v1/usage/" in cost
    operator = section(DOCS / "operator-guide.md", "Quotas, priorities and prices")
    for word in ("Quotas", "borrowing", "weight", "Priorities", "Prices", "cost_per_gb", "Budgets"):
        assert word in operator, word


def test_the_operator_guide_names_every_exported_metric_with_its_labels() -> None:
    operator = section(DOCS / "operator-guide.md", "Quotas, priorities and prices")
    gauges = [v for v in vars(metrics).values() if isinstance(v, metrics.Gauge)]
    assert len(gauges) >= 8
    for gauge in gauges:
        (family,) = gauge.describe()
        assert f"`{family.name}" in operator, family.name
    # The issue's two, with their labels (tests/portal/test_usage.py reads them exported).
    assert "`portal_usage_cpu_seconds_total{project,site}`" in operator
    assert "`portal_cost_total{project,site,kind}`" in operator
