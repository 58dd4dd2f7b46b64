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
from collections.abc import Callable, Iterator, Sequence
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
    fields = _fields(model)
    now = timezone.now()
    for f in fields:
        # What pre_save does on add, once for all rows.
        if _stamped(f):
            for obj in objs:
                setattr(obj, f.attname, now)
    ids = _copy(model, fields, ([getattr(o, f.attname) for f in fields] for o in objs), len(objs))
    pk = model._meta.pk
    assert pk is not None
    for obj, new_id in zip(objs, ids, strict=True):
        setattr(obj, pk.attname, new_id)
        obj._state.adding = False
        obj._state.db = connection.alias


def insert_rows(
    model: type[models.Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    batch_size: int,
) -> None:
    """Insert rows given as values of the fields ``names`` (attnames: ``run_id``), the other
    fields at their defaults, without a model object per row (what ``insert`` spends most
    of its time on when nobody needs the objects afterwards)."""
    if not rows:
        return
    if connection.vendor != "postgresql" or len(rows) < COPY_MIN_ROWS:
        model._default_manager.bulk_create(
            [model(**dict(zip(names, row, strict=True))) for row in rows], batch_size=batch_size
        )
        return
    fields = _fields(model)
    at = {name: i for i, name in enumerate(names)}
    now = timezone.now()
    fixed = [now if _stamped(f) else f.get_default() for f in fields]
    where = [at.get(f.attname) for f in fields]
    missing = [name for name in names if name not in {f.attname for f in fields}]
    if missing:
        raise ValueError(f"{model.__name__} has no field {missing[0]}")
    _copy(
        model,
        fields,
        ([fixed[j] if i is None else row[i] for j, i in enumerate(where)] for row in rows),
        len(rows),
    )


def _fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    pk = model._meta.pk
    return [f for f in model._meta.concrete_fields if f is not pk]


def _stamped(field: models.Field[Any, Any]) -> bool:
    return bool(getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))


def _copy(
    model: type[models.Model],
    fields: list[models.Field[Any, Any]],
    rows: Iterator[list[Any]],
    count: int,
) -> list[int]:
    """COPY ``count`` rows (values of ``fields``, in order) with new ids; the ids."""
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, pk.column, count],
        )
        ids = [row[0] for row in cursor.fetchall()]
        columns = ", ".join(quote(f.column) for f in (pk, *fields))
        # Per call: a JSON value many rows share (one list object) is encoded once. Keyed by
        # id(), which is safe while the rows, and so the values, are alive: during the call.
        texts: dict[int, str] = {}
        converters = [_converter(f, texts) for f in fields]
        raw = cursor.cursor  # psycopg's own cursor: Django's wrapper has no copy()
        with raw.copy(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for new_id, row in zip(ids, rows, strict=True):
                copy.write_row([new_id, *(c(v) for c, v in zip(converters, row, strict=True))])
    return ids


def _converter(field: models.Field[Any, Any], texts: dict[int, str]) -> Callable[[Any], Any]:
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        nullable = field.null

        def encode(value: Any) -> Any:
            if value is None and nullable:
                return None
            key = id(value)
            text = texts.get(key)
            if text is None:
                text = texts[key] = json.dumps(value, cls=encoder)
            return text

        return encode
    # Every other column of these models is a str, int, bool, datetime or None, which
    # psycopg writes as PostgreSQL reads them.
    return _same


def _same(value: Any) -> Any:
    return value
