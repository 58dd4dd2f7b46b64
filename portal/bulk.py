"""Big inserts through PostgreSQL's COPY (a fan-out's units and decisions).

A 10,000-item fan-out inserted 20,000 rows through ``bulk_create``: Django prepared every field
of every row (``get_db_prep_save``, 340,000 calls), psycopg spliced each literal into a
statement of 8,500 placeholders (its query splitter alone was a third of the CPU), and the
server parsed 40 such statements. ``COPY ... FROM STDIN`` streams the rows as text instead.
COPY returns no ids, so they are taken from the table's sequence first (one ``nextval`` query
for all of them), which is what ``bulk_create`` would have set on the objects.

Only plain rows are written this way: no ``ignore_conflicts``, no signals (``bulk_create``
sends none either). Other backends (the embedded SQLite demo) and small batches use
``bulk_create``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection, models
from django.utils import timezone

# Below this many rows a bulk_create is as fast and simpler (and what tests of small runs see).
COPY_MIN_ROWS = 200


def insert(objs: Sequence[models.Model], *, batch_size: int) -> None:
    """Insert ``objs`` (all of one model, unsaved) and set their primary keys, as
    ``bulk_create`` does."""
    if not objs:
        return
    model = type(objs[0])
    if connection.vendor != "postgresql" or len(objs) < COPY_MIN_ROWS:
        model._default_manager.bulk_create(objs, batch_size=batch_size)
        return
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    fields = [f for f in meta.concrete_fields if f is not pk]
    now = timezone.now()
    for f in fields:
        # What pre_save does on add, once for all rows.
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            for obj in objs:
                setattr(obj, f.attname, now)
    table = meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [table, pk.column, len(objs)],
        )
        ids = [row[0] for row in cursor.fetchall()]
        for obj, new_id in zip(objs, ids, strict=True):
            setattr(obj, pk.attname, new_id)
            obj._state.adding = False
            obj._state.db = connection.alias
        quote = connection.ops.quote_name
        columns = ", ".join(quote(f.column) for f in (pk, *fields))
        converters = [(f, _converter(f)) for f in fields]
        raw = cursor.cursor  # psycopg's own cursor: Django's wrapper has no copy()
        with raw.copy(f"COPY {quote(table)} ({columns}) FROM STDIN") as copy:
            for obj in objs:
                copy.write_row(
                    [obj.pk, *(convert(getattr(obj, f.attname)) for f, convert in converters)]
                )


def _converter(field: models.Field[Any, Any]) -> Callable[[Any], Any]:
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        nullable = field.null

        def encode(value: Any) -> Any:
            return None if value is None and nullable else json.dumps(value, cls=encoder)

        return encode
    # Every other column of these models is a str, int, bool, datetime or None, which
    # psycopg writes as PostgreSQL reads them.
    return _same


def _same(value: Any) -> Any:
    return value
