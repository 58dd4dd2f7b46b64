"""Template filters that put numbers into words on the pages."""

from __future__ import annotations

from placement.units import human_bytes
from portal.templatetags.portal_ui import human_bytes as page_human_bytes


def test_sizes_on_pages_read_as_in_the_planners_reasons() -> None:
    # A run page puts a reason ("dataset x (120 GiB) is at site-a") beside a size column.
    assert page_human_bytes(120 * 2**30) == human_bytes(120 * 2**30) == "120 GiB"
    assert page_human_bytes("1536") == "1.5 KiB"


def test_a_missing_size_is_a_dash() -> None:
    assert page_human_bytes(None) == "—"
    assert page_human_bytes("") == "—"
