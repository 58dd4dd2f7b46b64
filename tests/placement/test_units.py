"""Sizes and estimates in words: one formatter for the planner's reasons and the pages."""

from __future__ import annotations

import pytest

from placement.units import human_bytes, human_seconds


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (10 * 1024, "10 KiB"),
        (5 * 2**30, "5.0 GiB"),
        (120 * 2**30, "120 GiB"),
        (120 * 10**9, "112 GiB"),
        (3 * 2**40 // 2, "1.5 TiB"),
        (2048 * 2**40, "2048 TiB"),
    ],
)
def test_it_writes_sizes_in_binary_units(n: int, text: str) -> None:
    assert human_bytes(n) == text


def test_a_size_that_rounds_to_1024_goes_to_the_next_unit() -> None:
    assert human_bytes(1024 * 1024 - 10) == "1.0 MiB"


@pytest.mark.parametrize(
    ("s", "text"), [(0.4, "<1 s"), (96, "~96 s"), (960, "~16 min"), (9000, "~2.5 h")]
)
def test_it_writes_estimates_for_humans(s: float, text: str) -> None:
    assert human_seconds(s) == text
