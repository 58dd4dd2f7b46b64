"""Big inserts through PostgreSQL's COPY (a fan-out's units and decisions).

``bulk_create`` prepares every field of every row in Python and sends statements of thousands
of placeholders that psycopg splices and the server parses; for a big fan-out that costs more
than the work itself. ``COPY ... FROM STDIN`` streams the rows as text instead.
COPY returns no ids, so they are taken from the table's sequence first (one ``nextval`` query
for all of them), which is what ``bulk_create`` would have set on the objects.

Only plain rows are written this way: no ``ignore_conflicts``, no signals (``bulk_create``
sends none either). Other backends (the embedded SQLite demo) and small batches use
``bulk_create``.

Big reads by id have the same cost: ``filter(x__in=ids)`` sends one placeholder per id, and
psycopg (which binds on the client, Django's default) scans the statement once per placeholder:
10,000 ids cost 0.1 to 0.2 s before the server sees the query. ``x__any=ids`` (``AnyOf``)
sends the ids as one array, ``x = ANY(%s)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson
from django.db import connection, models
from django.db.models import Lookup
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
    fields at their defaults, without a model object per row when nobody needs the objects
    afterwards; the new ids, in order."""
    if not rows:
        return []
    columns = _Columns(model, names)
    if _small(rows):
        return [o.pk for o in columns.bulk_create(rows, batch_size)]
    return columns.copy(rows)


def create_rows(
    model: type[models.Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    batch_size: int,
) -> list[Any]:
    """``insert_rows``, and the stored objects as ``bulk_create`` returns them."""
    if not rows:
        return []
    columns = _Columns(model, names)
    if _small(rows):
        return columns.bulk_create(rows, batch_size)
    return columns.stored(rows, columns.copy(rows))


def insert_big(obj: models.Model) -> None:
    """One new object with a big JSON value (a submission's planning record holds every unit:
    7.5 MB for 10,000), through COPY on PostgreSQL: written by orjson and streamed, not
    written by ``json.dumps`` and spliced into the statement as an escaped literal (0.3 to
    0.4 s of a 10,000-item fan-out's 201, now about half). ``save`` elsewhere."""
    if connection.vendor != "postgresql":
        obj.save(force_insert=True)
        return
    model = type(obj)
    names = [f.attname for f in _fields(model)]
    obj.pk = _Columns(model, names).copy([[getattr(obj, n) for n in names]])[0]
    obj._state.adding, obj._state.db = False, connection.alias


def _small(rows: Sequence[Sequence[Any]]) -> bool:
    return connection.vendor != "postgresql" or len(rows) < COPY_MIN_ROWS


class _Columns:
    """Rows of ``model`` given as values of the fields ``names``: every concrete field but the
    primary key, each from its row or at its default."""

    def __init__(self, model: type[models.Model], names: Sequence[str]) -> None:
        self.model, self.names = model, names
        self.fields = _fields(model)
        known = {f.attname for f in self.fields}
        missing = [name for name in names if name not in known]
        if missing:
            raise ValueError(f"{model.__name__} has no field {missing[0]}")
        at = {name: i for i, name in enumerate(names)}
        self.where = [at.get(f.attname) for f in self.fields]
        now = timezone.now()
        # A column no row gives: its default, or ``now`` where ``pre_save`` would stamp it.
        # Defaults built by a callable (``dict``, ``list``) are built again for each object,
        # so no two objects share one; COPY may share them (encoded once).
        self.fixed = [now if _stamped(f) else f.get_default() for f in self.fields]
        self.fresh = [
            j
            for j, f in enumerate(self.fields)
            if self.where[j] is None and not _stamped(f) and f.has_default() and callable(f.default)
        ]

    def values(self, row: Sequence[Any]) -> list[Any]:
        fixed = self.fixed
        return [fixed[j] if i is None else row[i] for j, i in enumerate(self.where)]

    def bulk_create(self, rows: Sequence[Sequence[Any]], batch_size: int) -> list[Any]:
        """Small batches and other backends (the embedded SQLite demo): ``bulk_create`` of
        objects built from their values in field order (``Model(*values)``, Django's fast
        path, what a query's rows go through)."""
        objs = []
        for row in rows:
            vals = self.values(row)
            for j in self.fresh:
                vals[j] = self.fields[j].get_default()
            objs.append(self.model(None, *vals))
        self.model._default_manager.bulk_create(objs, batch_size=batch_size)
        return objs

    def copy(self, rows: Sequence[Sequence[Any]]) -> list[int]:
        return _copy(self.model, self.fields, (self.values(row) for row in rows), len(rows))

    def stored(self, rows: Sequence[Sequence[Any]], ids: list[int]) -> list[Any]:
        """The objects of rows just stored, built as unpickling builds a model object
        (``Model.__reduce__``: ``__new__`` and the attribute dict; Django's ``__init__``
        does the same, one field lookup at a time: half of the answer's time for 10,000
        rows)."""
        model = self.model
        pk = model._meta.pk
        assert pk is not None
        defaults = {f.attname: value for f, value in zip(self.fields, self.fixed, strict=True)}
        made = [(self.fields[j].attname, self.fields[j].get_default) for j in self.fresh]
        alias = connection.alias
        out = []
        for new_id, row in zip(ids, rows, strict=True):
            obj = model.__new__(model)
            state = ModelState()
            state.adding, state.db = False, alias
            attrs = obj.__dict__
            attrs.update(defaults)
            attrs.update(zip(self.names, row, strict=True))
            for name, default in made:
                attrs[name] = default()
            attrs[pk.attname] = new_id
            attrs["_state"] = state
            out.append(obj)
        return out


def _fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    pk = model._meta.pk
    # A generated column is PostgreSQL's to compute: COPY may not name it.
    return [
        f for f in model._meta.concrete_fields if f is not pk and not getattr(f, "generated", False)
    ]


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


class AnyOf(Lookup):
    """``field__any=ids``: ``field = ANY(array)`` on PostgreSQL, one parameter however many
    ids; ``field IN (...)`` elsewhere. Registered on key and id fields (``PortalConfig``)."""

    lookup_name = "any"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if not values:
            return "1 = 0", []
        return f"{lhs} IN ({', '.join(['%s'] * len(values))})", [*lhs_params, *values]

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", [*lhs_params, list(self.rhs)]
