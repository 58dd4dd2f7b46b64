"""The API's JSON is DRF's JSON, written faster (portal/api/renderers.py)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pytest
from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from portal.api.renderers import FastJSONRenderer

AWARE = dt.datetime(2026, 12, 3, 22, 1, 2, 345678, tzinfo=dt.UTC)

CASES: list[Any] = [
    {"a": 1, "b": [1.5, None, True, "x"], "c": {"d": "é ✓ 漢"}},
    {"when": AWARE, "day": AWARE.date(), "at": AWARE.time(), "naive": AWARE.replace(tzinfo=None)},
    {"amount": decimal.Decimal("1.10"), "id": uuid.UUID(int=7), "lazy": gettext_lazy("Pending")},
    {"js": "line\u2028separator\u2029paragraph"},
    {1: "int key", "nested": {2: [3]}},
    ReturnDict({"units": ReturnList([{"name": "a"}], serializer=None)}, serializer=None),
    [],
    "plain",
    2**70,  # past orjson's integers: DRF's way
]


@pytest.mark.parametrize("data", CASES)
def test_the_answer_is_drfs_json_byte_for_byte(data: Any) -> None:
    assert FastJSONRenderer().render(data) == JSONRenderer().render(data)


def test_an_indented_answer_is_drfs() -> None:
    data = {"a": [1, 2]}
    context = {"indent": 2}
    fast = FastJSONRenderer().render(data, "application/json", context)
    assert fast == JSONRenderer().render(data, "application/json", context)
    assert b"\n  " in fast


def test_nothing_renders_as_an_empty_body() -> None:
    assert FastJSONRenderer().render(None) == b""
