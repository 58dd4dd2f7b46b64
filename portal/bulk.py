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

import orjson
from django.db import connection, models
from django.db.models.base import ModelState
from django.utils import timezone

# Below this many rows a bulk_create is as fast and simpler (and what tests of small runs see).
COPY_MIN_ROWS = 200


def insert_rows(
    model: type[models.Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    batch_size: int,
) -> list[int]:
    """Insert rows given as values of the fields ``names`` (attnames: ``run_id``), the other
    fields at their defaults, without a model object per row (what ``insert`` spends most
    of its time on when nobody needs the objects afterwards); the new ids, in order."""
    return [o.pk for o in _insert_rows(model, names, rows, batch_size, objects=False)]


def create_rows(
    model: type[models.Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    batch_size: int,
) -> list[Any]:
    """``insert_rows``, and the stored objects as ``bulk_create`` returns them. Each is built
    from its values in field order, Django's fast path (``Model(*values)``, what a query's
    rows go through): a third of the time of keyword arguments, which look every field up
    and resolve a ForeignKey given as an object."""
    return _insert_rows(model, names, rows, batch_size, objects=True)


class _Ids:
    """An inserted row's id where no object is wanted (``insert_rows``)."""

    __slots__ = ("pk",)

    def __init__(self, pk: int) -> None:
        self.pk = pk


def _insert_rows(
    model: type[models.Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    batch_size: int,
    *,
    objects: bool,
) -> list[Any]:
    if not rows:
        return []
    fields = _fields(model)
    known = {f.attname for f in fields}
    missing = [name for name in names if name not in known]
    if missing:
        raise ValueError(f"{model.__name__} has no field {missing[0]}")
    at = {name: i for i, name in enumerate(names)}
    where = [at.get(f.attname) for f in fields]
    now = timezone.now()
    # A column no row gives: its default, or ``now`` where ``pre_save`` would stamp it.
    # Defaults built by a callable (``dict``, ``list``) are built again for each object,
    # so no two objects share one; COPY may share them (encoded once).
    fixed = [now if _stamped(f) else f.get_default() for f in fields]
    fresh = [
        j
        for j, f in enumerate(fields)
        if where[j] is None and not _stamped(f) and f.has_default() and callable(f.default)
    ]

    def values(row: Sequence[Any]) -> list[Any]:
        return [fixed[j] if i is None else row[i] for j, i in enumerate(where)]

    def built(pk: int | None, row: Sequence[Any]) -> models.Model:
        vals = values(row)
        for j in fresh:
            vals[j] = fields[j].get_default()
        obj = model(pk, *vals)
        if pk is not None:
            obj._state.adding = False
            obj._state.db = connection.alias
        return obj

    if connection.vendor != "postgresql" or len(rows) < COPY_MIN_ROWS:
        objs = [built(None, row) for row in rows]
        model._default_manager.bulk_create(objs, batch_size=batch_size)
        return objs
    ids = _copy(model, fields, (values(row) for row in rows), len(rows))
    if not objects:
        return [_Ids(pk) for pk in ids]
    return _stored(model, fields, names, rows, ids, fixed, fresh)


def _stored(
    model: type[models.Model],
    fields: list[models.Field[Any, Any]],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    ids: list[int],
    fixed: list[Any],
    fresh: list[int],
) -> list[Any]:
    """The objects of rows just stored, built as unpickling builds a model object
    (``Model.__reduce__``: ``__new__`` and the attribute dict; Django's ``__init__`` does
    the same, one field lookup at a time: half of the answer's time for 10,000 rows)."""
    pk = model._meta.pk
    assert pk is not None
    defaults = {f.attname: value for f, value in zip(fields, fixed, strict=True)}
    made = [(fields[j].attname, fields[j].get_default) for j in fresh]
    alias = connection.alias
    new = model.__new__
    out = []
    for new_id, row in zip(ids, rows, strict=True):
        obj = new(model)
        state = ModelState()
        state.adding, state.db = False, alias
        attrs = obj.__dict__
        attrs.update(defaults)
        attrs.update(zip(names, row, strict=True))
        for name, default in made:
            attrs[name] = default()
        attrs[pk.attname] = new_id
        attrs["_state"] = state
        out.append(obj)
    return out


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
        # Only JSON columns are converted: every other column of these models is a str, int,
        # bool, datetime or None, which psycopg writes as PostgreSQL reads them.
        encoders = [
            (j + 1, _json_encoder(f, texts))
            for j, f in enumerate(fields)
            if isinstance(f, models.JSONField)
        ]
        raw = cursor.cursor  # psycopg's own cursor: Django's wrapper has no copy()
        with raw.copy(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for new_id, row in zip(ids, rows, strict=True):
                line = [new_id, *row]
                for j, encode in encoders:
                    line[j] = encode(line[j])
                copy.write_row(line)
    return ids


def _json_encoder(field: models.JSONField[Any], texts: dict[int, str]) -> Callable[[Any], Any]:
    encoder = field.encoder
    nullable = field.null

    def dumps(value: Any) -> str:
        # orjson: a tenth of json.dumps's time (10,000 unit specs: 0.2 s). PostgreSQL stores
        # jsonb, not the text, so the two spellings store the same value. What orjson refuses
        # (a 65-bit integer, a field's own encoder) goes through json.dumps, as before.
        if encoder is None:
            try:
                return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
            except TypeError:
                pass
        return json.dumps(value, cls=encoder)

    def encode(value: Any) -> Any:
        if value is None and nullable:
            return None
        key = id(value)
        text = texts.get(key)
        if text is None:
            text = texts[key] = dumps(value)
        return text

    return encode
