"""NUL characters (U+0000) in what a client sends: PostgreSQL stores them in no text or jsonb
column, so a value holding one fails deep in a query (a 500) unless it is refused on the way
in, with the field that held it (portal/middleware.py for paths, query strings and forms;
sites/api/parsers.py for the API's JSON bodies; the workflow decoder for workflow documents)."""

from __future__ import annotations

from typing import Any

NUL = "\x00"
MESSAGE = "must not contain a NUL character (U+0000)"


def shown(key: str) -> str:
    """A key as a path segment, with its NULs written as escapes."""
    return key.replace(NUL, "\\u0000")


def nul_path(value: Any, path: str = "") -> str | None:
    """The path (``a.b[0]``) of the first key or string in ``value`` holding a NUL; None when
    there is none. Iterative: a deeply nested body must not exhaust the stack."""
    todo: list[tuple[Any, str]] = [(value, path)]
    while todo:
        item, where = todo.pop()
        if isinstance(item, str):
            if NUL in item:
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                at = f"{where}.{shown(str(key))}" if where else shown(str(key))
                if isinstance(key, str) and NUL in key:
                    return at
                todo.append((child, at))
        elif isinstance(item, list | tuple):
            todo.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None
