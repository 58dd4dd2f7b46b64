"""Rule revisions over REST: list, draft, and the review actions, each calling one service."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from placement.choices import Timing
from placement.revisions import replay as replaying
from placement.revisions import services
from placement.revisions.models import RuleRevision
from placement.revisions.selectors import current_config, revisions_list
from sites.api.base import BaseViewSet
from sites.permissions import AnyUser, is_fleet_staff

OPERATOR_GROUPS = ("operators", "rule editors")


def can_write_revisions(user: AnyUser) -> bool:
    """Fleet staff and the sites' operators (the operators and rule editors groups, and
    users who operate a site) propose and review revisions; everyone else reads."""
    if is_fleet_staff(user):
        return True
    if not user.is_authenticated or not user.is_active:
        return False
    return user.groups.filter(name__in=OPERATOR_GROUPS).exists() or user.operated_sites.exists()


class RevisionsReadOrOperate(BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        return request.method in SAFE_METHODS or can_write_revisions(request.user)


class RuleRevisionSerializer(serializers.ModelSerializer[RuleRevision]):
    author: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    approved_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    applied_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = RuleRevision
        fields = [
            "id",
            "parent",
            "restores",
            "author",
            "approved_by",
            "applied_by",
            "state",
            "comment",
            "source",
            "diff",
            "config",
            "replay_summary",
            "created_at",
            "approved_at",
            "applied_at",
        ]
        read_only_fields = fields


class DraftInputSerializer(serializers.Serializer[Any]):
    config = serializers.JSONField()
    parent = serializers.IntegerField(  # type: ignore[assignment]  # a field, not a serializer
        required=False, allow_null=True, min_value=1
    )
    comment = serializers.CharField(required=False, allow_blank=True, max_length=10000)


class ReplayInputSerializer(serializers.Serializer[Any]):
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=100000, default=replaying.DEFAULT_LIMIT
    )
    project = serializers.CharField(required=False, allow_blank=True, max_length=150)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class MovedUnitSerializer(serializers.Serializer[Any]):
    run = serializers.IntegerField(allow_null=True)  # none: a Workflow created on Karmada
    unit = serializers.CharField()
    timing = serializers.ChoiceField(choices=Timing.choices)
    from_ = serializers.CharField(allow_null=True)
    to = serializers.CharField(allow_null=True)
    why = serializers.CharField()

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # "from" is a Python keyword: the field is declared as from_ and answered as from.
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class ReplayAnswerSerializer(serializers.Serializer[Any]):
    """What replay answers (documentation of the schema: the dict is answered as built)."""

    moved = MovedUnitSerializer(many=True)
    summary = serializers.DictField()


class CommentInputSerializer(serializers.Serializer[Any]):
    comment = serializers.CharField(required=False, allow_blank=True, max_length=10000)


def _raise(exc: Exception) -> Response:
    """The error response of a service's refusal: a conflict names the newer revision (its
    id as a number, which DRF's exception handler would turn into text)."""
    if isinstance(exc, services.RevisionConflict):
        return Response(
            {"detail": str(exc), "newer": exc.newer.pk, "newer_state": exc.newer.state},
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, services.RevisionForbidden):
        raise PermissionDenied(str(exc)) from exc
    if isinstance(exc, services.RevisionError):
        raise ValidationError(exc.detail) from exc
    raise exc


@extend_schema_view(
    list=extend_schema(summary="Rule revisions, newest first (the audit trail)"),
    retrieve=extend_schema(summary="One rule revision with its diff"),
)
class RuleRevisionViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, BaseViewSet[RuleRevision]
):
    permission_classes = [RevisionsReadOrOperate]
    serializer_class = RuleRevisionSerializer

    def get_queryset(self) -> QuerySet[RuleRevision]:
        return revisions_list()

    @extend_schema(
        summary="Propose a draft (operators)",
        request=DraftInputSerializer,
        responses={201: RuleRevisionSerializer},
    )
    def create(self, request: Request) -> Response:
        data = DraftInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            revision = services.revision_draft_create(
                user=request.user,
                config=data.validated_data["config"],
                parent_id=data.validated_data.get("parent"),
                comment=data.validated_data.get("comment", ""),
            )
        except (services.RevisionError, services.RevisionConflict) as exc:
            return _raise(exc)
        return Response(RuleRevisionSerializer(revision).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Replay the revision over past decisions",
        request=ReplayInputSerializer,
        responses={200: ReplayAnswerSerializer},
    )
    @action(detail=True, methods=["post"])
    def replay(self, request: Request, pk: str | None = None) -> Response:
        revision = self.get_object()
        data = ReplayInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        result = replaying.replay(
            base=current_config(),
            draft=revision.config,
            limit=v["limit"],
            project=v.get("project") or None,
            since=v.get("since"),
            until=v.get("until"),
        )
        return Response(result)

    @extend_schema(summary="Approve a draft (not its author)", request=None)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self._act(services.revision_approve)

    @extend_schema(summary="Reject a draft", request=None)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self._act(services.revision_reject)

    @extend_schema(summary="Apply the revision: it becomes the active one", request=None)
    @action(detail=True, methods=["post"])
    def apply(self, request: Request, pk: str | None = None) -> Response:
        revision = self.get_object()
        summary = replaying.replay(base=current_config(), draft=revision.config)["summary"]
        try:
            revision = services.revision_apply(
                revision=revision, user=request.user, replay_summary=summary
            )
        except (services.RevisionError, services.RevisionConflict) as exc:
            return _raise(exc)
        return Response(RuleRevisionSerializer(revision).data)

    @extend_schema(
        summary="A new draft equal to this revision (reviewed and applied as any other)",
        request=CommentInputSerializer,
        responses={201: RuleRevisionSerializer},
    )
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        revision = self.get_object()
        data = CommentInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            draft = services.revision_rollback(
                revision=revision, user=request.user, comment=data.validated_data.get("comment", "")
            )
        except (services.RevisionError, services.RevisionConflict) as exc:
            return _raise(exc)
        return Response(RuleRevisionSerializer(draft).data, status=status.HTTP_201_CREATED)

    def _act(self, service: Any) -> Response:
        revision = self.get_object()
        try:
            revision = service(revision=revision, user=self.request.user)
        except (
            services.RevisionError,
            services.RevisionConflict,
            services.RevisionForbidden,
        ) as exc:
            return _raise(exc)
        return Response(RuleRevisionSerializer(revision).data)
