"""Model fields of the portal's own."""

from __future__ import annotations

from typing import Any

from django.db import models

# Rows per INSERT when bulk-inserting models with an InlineJSONField: each statement stays a
# few hundred KB, and under PostgreSQL's 65,535 bind parameters should server-side binding
# ever be turned on (Django's client-side binding, the default, has no such limit).
BULK_ROWS = 500


class InlineJSONField(models.JSONField):
    """A JSONField whose bulk inserts are written as VALUES rows, not UNNEST arrays.

    On PostgreSQL, Django 5.2 bulk-inserts through ``UNNEST(array, ...)``, which saves
    planning time for thousands of rows; but psycopg escapes every JSON text into the array
    literal in Python, and a submission's few units and decisions paid about 2 ms of the web
    process's CPU for it. Django keeps VALUES for a field that has ``get_placeholder`` (its
    placeholder could depend on the value); this one is the plain ``%s``, as without it."""

    def get_placeholder(self, value: Any, compiler: Any, connection: Any) -> str:
        return "%s"
