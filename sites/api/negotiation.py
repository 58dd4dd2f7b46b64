from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.settings import api_settings


class _NoFormatOverride:
    """``api_settings`` with ``URL_FORMAT_OVERRIDE`` switched off."""

    URL_FORMAT_OVERRIDE = None

    def __getattr__(self, name: str) -> Any:
        return getattr(api_settings, name)


class FormatIsAFilterNegotiation(DefaultContentNegotiation):
    """Content negotiation that leaves ``?format=`` alone: on datasets it filters by the data
    format (``?format=zarr``), it does not pick a renderer."""

    settings = _NoFormatOverride()  # type: ignore[assignment]
