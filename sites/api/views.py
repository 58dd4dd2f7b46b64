"""Inventory API: thin viewsets; writes go through ``sites.services``."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from sites import selectors, services
from sites.api.base import BaseModelViewSet, BaseViewSet
from sites.api.negotiation import FormatIsAFilterNegotiation
from sites.api.permissions import CanOperateSite, CanWriteDataset
from sites.api.serializers import DatasetSerializer, SitePatchAnswerSerializer, SiteSerializer
from sites.filtersets import DatasetFilterSet, SiteFilterSet
from sites.models import Dataset, Project, Site
from sites.permissions import can_write_project_data
from sites.validators import problems_detail


def _conflict() -> ValidationError:
    # The serializer checked the name and the replica sites; only a concurrent write with the
    # same name (or replica) gets here, and it is the client's to retry, not a 500.
    return ValidationError({"name": ["A dataset with this name was stored concurrently; retry."]})


@extend_schema_view(
    list=extend_schema(summary="List the sites of the fleet"),
    retrieve=extend_schema(summary="One site, by name"),
    partial_update=extend_schema(
        summary="Cordon a site, replace its labels, merge a patch into its overrides",
        responses={200: SitePatchAnswerSerializer},
    ),
)
class SiteViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    BaseViewSet[Site],
):
    permission_classes = [IsAuthenticated, CanOperateSite]
    serializer_class = SiteSerializer
    filterset_class = SiteFilterSet
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[Site]:
        return selectors.site_list()

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        site = self.get_object()
        serializer = self.get_serializer(site, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        data: dict[str, Any] = serializer.validated_data
        try:
            changed = services.site_update(site=site, user=request.user, **data)
        except services.SiteUpdateRefused as exc:
            raise ValidationError(problems_detail(exc.field, exc.problems)) from None
        return Response({**SiteSerializer(site).data, "changes": changed})


@extend_schema_view(
    list=extend_schema(summary="List the datasets you can see"),
    retrieve=extend_schema(summary="One dataset with its replicas"),
    create=extend_schema(summary="Register a dataset with its replicas"),
    partial_update=extend_schema(summary="Change a dataset; `replicas` replaces them all"),
    destroy=extend_schema(summary="Delete a dataset and its replicas"),
)
class DatasetViewSet(BaseModelViewSet[Dataset]):
    permission_classes = [IsAuthenticated, CanWriteDataset]
    content_negotiation_class = FormatIsAFilterNegotiation
    # No PUT: a dataset is changed with PATCH (DESIGN section 9).
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    serializer_class = DatasetSerializer
    filterset_class = DatasetFilterSet

    def get_queryset(self) -> QuerySet[Dataset]:
        return selectors.dataset_list_visible(self.request.user)

    def _check_project(self, project: Project | None) -> None:
        if not can_write_project_data(self.request.user, project):
            raise PermissionDenied(
                "Only fleet staff may write fleet-wide datasets."
                if project is None
                else f"You are not a member of project '{project.name}'."
            )

    def perform_create(self, serializer: BaseSerializer[Dataset]) -> None:
        data: dict[str, Any] = dict(serializer.validated_data)
        self._check_project(data.get("project"))
        try:
            serializer.instance = services.dataset_create(user=self.request.user, **data)
        except IntegrityError as exc:
            raise _conflict() from exc

    def perform_update(self, serializer: BaseSerializer[Dataset]) -> None:
        assert serializer.instance is not None
        data: dict[str, Any] = dict(serializer.validated_data)
        if "project" in data:
            self._check_project(data["project"])
        try:
            serializer.instance = services.dataset_update(
                dataset=serializer.instance, user=self.request.user, **data
            )
        except IntegrityError as exc:
            raise _conflict() from exc

    def perform_destroy(self, instance: Dataset) -> None:
        services.dataset_delete(dataset=instance, user=self.request.user)
