"""The base of every REST viewset of the portal (sites, datasets, rules, rule revisions, runs,
the WorkflowTemplate catalogue): one pagination, one parser, one filter backend, so a client
that knows one list knows them all.

It lives here because ``sites`` is the floor every other app builds on. Authentication,
permissions by default, renderers and the error handler are the project's
(``REST_FRAMEWORK`` in the settings); a viewset that reads a Workflow body itself (YAML or
JSON, with its own limits) swaps the parser per request in ``get_parsers``.
"""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import mixins, viewsets

from sites.api.pagination import BoundedLimitOffsetPagination
from sites.api.parsers import StrictJSONParser

_M = TypeVar("_M", bound=Model)


# No docstrings on these bases: drf-spectacular describes an operation with the first
# docstring it finds on its viewset's classes, and these would describe every endpoint.


class BaseViewSet(viewsets.GenericViewSet[_M]):
    # A viewset without actions: limit/offset pages bounded to what PostgreSQL accepts, JSON
    # bodies read strictly (nesting, NUL characters), filters by a ``FilterSet``.

    pagination_class = BoundedLimitOffsetPagination
    parser_classes = [StrictJSONParser]
    filter_backends = [DjangoFilterBackend]


class BaseModelViewSet(
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    mixins.ListModelMixin,
    BaseViewSet[_M],
):
    # ``BaseViewSet`` with list, retrieve, create, update and destroy, as DRF's ModelViewSet.
    pass
