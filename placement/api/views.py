"""Placement rules API: a plain CRUD viewset (writes are single saves, no service needed)."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.exceptions import ValidationError
from rest_framework.serializers import BaseSerializer

from placement.api.permissions import RulesReadOrEdit
from placement.api.serializers import PlacementRuleSerializer
from placement.filtersets import PlacementRuleFilterSet
from placement.models import PlacementRule
from placement.revisions.services import revision_baseline, revision_record_direct
from sites.api.base import BaseModelViewSet


@extend_schema_view(
    list=extend_schema(summary="List placement rules in evaluation order"),
    retrieve=extend_schema(summary="One placement rule"),
    create=extend_schema(summary="Add a placement rule (rule editors)"),
    partial_update=extend_schema(summary="Change a placement rule (rule editors)"),
    destroy=extend_schema(summary="Delete a placement rule (rule editors)"),
)
class PlacementRuleViewSet(BaseModelViewSet[PlacementRule]):
    permission_classes = [RulesReadOrEdit]
    serializer_class = PlacementRuleSerializer
    filterset_class = PlacementRuleFilterSet
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[PlacementRule]:
        return PlacementRule.objects.order_by("order", "name")

    def perform_create(self, serializer: BaseSerializer[PlacementRule]) -> None:
        self._save(serializer)

    def perform_update(self, serializer: BaseSerializer[PlacementRule]) -> None:
        self._save(serializer)

    def perform_destroy(self, instance: PlacementRule) -> None:
        with transaction.atomic():
            revision_baseline()
            instance.delete()
            revision_record_direct(user=self.request.user, source="api")

    def _save(self, serializer: BaseSerializer[PlacementRule]) -> None:
        try:
            with transaction.atomic():
                revision_baseline()  # the configuration before the edit, if none is kept yet
                serializer.save()
                revision_record_direct(user=self.request.user, source="api")
        except IntegrityError as exc:
            # Only a concurrent write of the same name passes the serializer's unique check.
            raise ValidationError(
                {"name": ["A rule with this name was stored concurrently."]}
            ) from exc
