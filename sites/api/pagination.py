from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """Limit/offset pagination whose numbers stay inside what PostgreSQL's LIMIT and OFFSET
    accept (a huge ``offset`` would otherwise be a database error, a 500)."""

    max_limit = 1000
    max_offset = 2**62

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), self.max_offset)
