"""pystac's validator, offline: the STAC 1.1.0 core schemas pystac ships, plus the extension
schemas the portal's documents name, kept here as their repositories tag them
(stac-extensions/storage v1.0.0 ``json-schema/schema.json``, stac-extensions/alternate-assets
v1.2.0 ``json-schema/schema.json``, and radiantearth/stac-spec v1.0.0
``item-spec/json-schema/basics.json``, which alternate-assets refers to). A schema not found
here fails the validation instead of being fetched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pystac
from pystac.validation.stac_validator import GetSchemaError, JsonSchemaSTACValidator

SCHEMAS = Path(__file__).with_name("schemas")
LOCAL = {
    "https://stac-extensions.github.io/storage/v1.0.0/schema.json": "storage-v1.0.0.json",
    "https://stac-extensions.github.io/alternate-assets/v1.2.0/schema.json": (
        "alternate-assets-v1.2.0.json"
    ),
    "https://schemas.stacspec.org/v1.0.0/item-spec/json-schema/basics.json": (
        "stac-v1.0.0-item-basics.json"
    ),
}


class OfflineValidator(JsonSchemaSTACValidator):
    def __init__(self) -> None:
        super().__init__()
        for uri, name in LOCAL.items():
            schema = json.loads((SCHEMAS / name).read_text())
            self.schema_cache[uri] = schema
            # The same schema under the id it gives itself (a trailing "#").
            self.schema_cache[str(schema.get("$id", uri)).rstrip("#")] = schema

    def _get_schema(self, schema_uri: str) -> dict[str, Any]:
        key = schema_uri.rstrip("#")
        if key not in self.schema_cache:
            raise GetSchemaError(schema_uri, RuntimeError("not available offline"))
        return self.schema_cache[key]


def validate(doc: dict[str, Any]) -> list[str]:
    """Every schema ``doc`` was validated against (pystac raises on the first failure)."""
    return pystac.validation.validate_dict(doc, validator=OfflineValidator())
