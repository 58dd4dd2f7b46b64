"""REST for a shared fleet: ``/api/v1/quotas/`` (fleet staff write, everyone reads, each with
what its project holds now), ``/api/v1/priority-classes/`` and ``/api/v1/usage/``."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import mixins, permissions, serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.models import UnitRun
from portal.quotas import budgets, overview, quantities, scopes, usage, waking
from portal.quotas.admission import Amount
from portal.quotas.models import PriorityClass, Quota, selector_error
from portal.selectors import runs_visible_to
from sites.models import Project, Site
from sites.permissions import is_fleet_staff


class FleetStaffWrites(permissions.BasePermission):
    """Everybody authenticated reads; fleet staff write."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or is_fleet_staff(request.user)


@extend_schema_field(OpenApiTypes.STR)
class _Cpu(serializers.Field[int, Any, str, Any]):
    def to_internal_value(self, data: Any) -> int:
        try:
            return quantities.millicores(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: int) -> str:
        return quantities.cpu_text(value)


@extend_schema_field(OpenApiTypes.STR)
class _Memory(serializers.Field[int, Any, str, Any]):
    def to_internal_value(self, data: Any) -> int:
        try:
            return quantities.bytes_of(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: int) -> str:
        return quantities.memory_text(value)


@extend_schema_field(OpenApiTypes.INT)
class _Gpu(serializers.Field[int, Any, int, Any]):
    def to_internal_value(self, data: Any) -> int:
        try:
            return quantities.gpus(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: int) -> int:
        return int(value)


class BorrowingSerializer(serializers.Serializer[dict[str, Any]]):
    """How much more than its nominal quota the project may borrow; a resource left out (or
    null) has no limit, "0" forbids borrowing it."""

    cpu = _Cpu(required=False, allow_null=True)
    memory = _Memory(required=False, allow_null=True)
    gpu = _Gpu(required=False, allow_null=True)


class QuotaSerializer(serializers.Serializer[Quota]):
    id = serializers.IntegerField(read_only=True)
    project = serializers.SlugRelatedField(slug_field="name", queryset=Project.objects.all())
    site = serializers.SlugRelatedField(
        slug_field="name", queryset=Site.objects.all(), required=False, allow_null=True
    )
    site_selector = serializers.JSONField(required=False, allow_null=True)
    cpu = _Cpu(source="cpu_millicores", required=False, default=0)
    memory = _Memory(source="memory_bytes", required=False, default=0)
    gpu = _Gpu(source="gpus", required=False, default=0)
    borrowing = BorrowingSerializer(required=False, allow_null=True)

    def to_representation(self, instance: Quota) -> dict[str, Any]:
        def limit(value: int | None, text: Any) -> Any:
            return None if value is None else text(value)

        return {
            "id": instance.pk,
            "project": instance.project.name,
            "site": instance.site.name if instance.site_id is not None and instance.site else None,
            "site_selector": instance.site_selector or None,
            "sites": scopes.quota_sites(instance),
            "cpu": quantities.cpu_text(instance.cpu_millicores),
            "memory": quantities.memory_text(instance.memory_bytes),
            "gpu": instance.gpus,
            "borrowing": {
                "cpu": limit(instance.borrow_cpu_millicores, quantities.cpu_text),
                "memory": limit(instance.borrow_memory_bytes, quantities.memory_text),
                "gpu": instance.borrow_gpus,
            },
        }

    def validate_site_selector(self, value: Any) -> dict[str, str]:
        if value is None or value == {}:
            return {}
        why = selector_error(value)
        if why:
            raise serializers.ValidationError(why)
        return dict(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """A site or a group of sites (``site_selector``): one of them. An update naming only
        one of the two moves the quota there (the other is cleared)."""
        inst = self.instance
        if inst is not None and self.partial:
            if attrs.get("site") is not None and "site_selector" not in attrs:
                attrs["site_selector"] = {}
            if attrs.get("site_selector") and "site" not in attrs:
                attrs["site"] = None
        site = attrs.get("site", inst.site if inst else None)
        selector = attrs.get("site_selector", inst.site_selector if inst else {})
        if site is not None and selector:
            raise serializers.ValidationError(
                {"site_selector": ["name a site or a group of sites, not both"]}
            )
        if site is None and not selector:
            raise serializers.ValidationError(
                {"site": ["name a site, or a group of sites by site_selector"]}
            )
        return attrs

    def _fields(self, data: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in data.items() if k != "borrowing"}
        if "borrowing" in data:
            b = data["borrowing"] or {}
            out["borrow_cpu_millicores"] = b.get("cpu")
            out["borrow_memory_bytes"] = b.get("memory")
            out["borrow_gpus"] = b.get("gpu")
        return out

    def create(self, validated_data: dict[str, Any]) -> Quota:
        try:
            with transaction.atomic():
                return Quota.objects.create(**self._fields(validated_data))
        except IntegrityError:
            raise serializers.ValidationError(
                {
                    "site_selector" if validated_data.get("site_selector") else "site": [
                        "this project already has a quota at this site or group; PATCH it"
                    ]
                }
            ) from None

    def update(self, instance: Quota, validated_data: dict[str, Any]) -> Quota:
        for key, value in self._fields(validated_data).items():
            setattr(instance, key, value)
        try:
            with transaction.atomic():
                instance.save()
        except IntegrityError:
            raise serializers.ValidationError(
                {
                    "site_selector" if instance.site_selector else "site": [
                        "this project already has a quota at this site or group"
                    ]
                }
            ) from None
        return instance


def _use(used: Amount, queued: int) -> dict[str, Any]:
    return {
        "cpu": quantities.cpu_text(used.cpu),
        "memory": quantities.memory_text(used.memory),
        "gpu": used.gpu,
        "queued_units": queued,
    }


class QuotaViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[Quota],
):
    """Quotas per project and site, each with ``used`` (what its admitted, unfinished units
    hold there now) and how many of its units wait for it."""

    serializer_class = QuotaSerializer
    permission_classes = [FleetStaffWrites]
    queryset = Quota.objects.select_related("project", "site").order_by(
        "site__name", "project__name"
    )
    pagination_class = None

    def perform_create(self, serializer: Any) -> None:
        serializer.save()
        waking.quota_changed_at(scopes.quota_sites(serializer.instance))

    def perform_update(self, serializer: Any) -> None:
        before = scopes.quota_sites(serializer.instance)
        serializer.save()
        waking.quota_changed_at([*before, *scopes.quota_sites(serializer.instance)])

    def perform_destroy(self, instance: Quota) -> None:
        sites = scopes.quota_sites(instance)
        instance.delete()
        waking.quota_changed_at(sites)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        rows = overview.quota_rows()
        project = request.query_params.get("project")
        site = request.query_params.get("site")
        out = []
        for row in rows:
            q = row["quota"]
            if (project and q.project.name != project) or (site and site not in row["sites"]):
                continue
            out.append({**QuotaSerializer(q).data, "used": _use(row["used"], row["queued"])})
        return Response(out)


class PriorityClassSerializer(serializers.ModelSerializer[PriorityClass]):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "description"]


class PriorityClassViewSet(viewsets.ModelViewSet[PriorityClass]):
    """Priority classes (name, value): a run's class orders it in the quota queue."""

    serializer_class = PriorityClassSerializer
    permission_classes = [FleetStaffWrites]
    queryset = PriorityClass.objects.all()
    lookup_field = "name"
    pagination_class = None


def _moment(name: str, value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        try:
            day = parse_date(value)
        except ValueError:
            day = None
        if day is None:
            raise serializers.ValidationError(
                {name: ["an ISO 8601 date or date-time, such as 2026-12-01"]}
            )
        parsed = datetime.combine(day, time.min)
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    return parsed


class UsageView(APIView):
    """Usage and cost of the units that ended in a period (``from`` inclusive, ``to``
    exclusive; units still running count until now), by ``group_by`` (site, run, user, day or
    project), for the runs the caller may see. ``?export=csv`` answers CSV."""

    @extend_schema(
        parameters=[
            OpenApiParameter("project", str),
            OpenApiParameter("site", str),
            OpenApiParameter("from", str, description="ISO date or date-time, inclusive"),
            OpenApiParameter("to", str, description="ISO date or date-time, exclusive"),
            OpenApiParameter("group_by", str, enum=list(usage.GROUPS)),
            OpenApiParameter("export", str, enum=["csv"]),
        ],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "text/csv"): OpenApiTypes.STR,
            (400, "application/json"): OpenApiTypes.OBJECT,
        },
    )
    def get(self, request: Request) -> HttpResponse | Response:
        params = request.query_params
        group_by = params.get("group_by") or "site"
        if group_by not in usage.GROUPS:
            raise serializers.ValidationError({"group_by": [f"one of {', '.join(usage.GROUPS)}"]})
        start = _moment("from", params.get("from"))
        end = _moment("to", params.get("to"))
        runs = runs_visible_to(request.user)
        if params.get("project"):
            runs = runs.filter(project__name=params["project"])
        units = UnitRun.objects.filter(run__in=runs.values("pk"))
        if params.get("site"):
            units = units.filter(site=params["site"])
        total, rows = usage.usage(usage.in_period(units, start, end), group_by)
        if params.get("export") == "csv":
            answer = HttpResponse(
                usage.as_csv(group_by, total, rows), content_type="text/csv; charset=utf-8"
            )
            answer["Content-Disposition"] = 'attachment; filename="usage.csv"'
            return answer
        standing = None
        if params.get("project"):
            project = Project.objects.filter(name=params["project"]).first()
            found = budgets.standing(project) if project is not None else None
            standing = found.as_dict() if found is not None else None
        return Response(
            {
                "budget": standing,
                "total": usage.money(total.total),
                "compute": usage.money(total.compute),
                "transfer": usage.money(total.transfer),
                "currency": usage.currency(),
                "group_by": group_by,
                "rows": [r.as_dict() for r in rows],
            }
        )
