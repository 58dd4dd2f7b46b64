from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

from sites.nul import MESSAGE, nul_path


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, plus a 400 for nesting too deep for Python's decoder and one naming
    the field for a NUL character anywhere in the body (sites/nul.py).

    DRF turns ``ValueError`` into a ParseError but not ``RecursionError``, so a body of a few
    hundred thousand ``[`` would otherwise be a 500. The API's default parser (settings).
    """

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc
        path = nul_path(data)
        if path is not None:
            raise ValidationError({path: [MESSAGE]} if path else [MESSAGE])
        return data
