"""Serializers of the inventory API. They validate and shape data; services do the writing."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sites.choices import ReplicaState
from sites.models import Dataset, DatasetReplica, Project, Site
from sites.services import ReplicaInput
from sites.validators import (
    label_map_problems,
    printable_key,
    problems_detail,
    region_list_problems,
    text_problem,
)

BIGINT_MAX = 2**63 - 1


class NameRelatedField(serializers.SlugRelatedField):
    """A related object by its ``name``; anything but a plain string is a 400, not a query."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="name", **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or len(data) > 253 or text_problem(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFieldsMixin:
    """Answer a 400 for keys the serializer does not accept, instead of silently ignoring them:
    a typo (``replica``) or a read-only field (``ready``) in a PATCH is a client error."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            writable = {
                name
                for name, field in self.fields.items()  # type: ignore[attr-defined]
                if not field.read_only
            }
            unknown = sorted(str(key) for key in data if key not in writable)
            fields = self.fields  # type: ignore[attr-defined]
            if unknown:
                raise serializers.ValidationError(
                    {
                        printable_key(key): [
                            "This field is read-only." if key in fields else "Unknown field."
                        ]
                        for key in unknown
                    }
                )
        return super().to_internal_value(data)  # type: ignore[misc]


# --- Sites ----------------------------------------------------------------------------------


class ResourceCapacitySerializer(serializers.Serializer[dict[str, int]]):
    allocatable = serializers.IntegerField()
    allocated = serializers.IntegerField()
    free = serializers.IntegerField()


class SiteCapacitySerializer(serializers.Serializer[dict[str, Any]]):
    """CPU in millicores, memory in bytes, GPUs and pods as counts."""

    cpu = ResourceCapacitySerializer()
    memory = ResourceCapacitySerializer()
    gpu = ResourceCapacitySerializer()
    pods = ResourceCapacitySerializer()


def _capacity(allocatable: int, allocated: int) -> dict[str, int]:
    return {
        "allocatable": allocatable,
        "allocated": allocated,
        "free": max(allocatable - allocated, 0),
    }


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string"}, "example": {"tier": "gold"}}
)
class LabelMapField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "artifact_repository": {"type": "object", "additionalProperties": True},
            "artifact_store": {
                "type": "object",
                "properties": {
                    "endpoint": {"type": "string"},
                    "bucket": {"type": "string"},
                    "credentials_secret": {"type": "string"},
                    "region": {"type": "string"},
                    "proxy": {"type": "string"},
                },
                "required": ["bucket"],
                "additionalProperties": False,
            },
            "gpu_node_selector": {"type": "object", "additionalProperties": {"type": "string"}},
            "image_registry_mirror": {"type": "string"},
        },
        "additionalProperties": False,
    }
)
class OverridesField(serializers.JSONField):
    pass


class SiteSerializer(StrictFieldsMixin, serializers.ModelSerializer[Site]):
    """A site (Karmada member cluster).

    Only the operator fields are writable (PATCH by fleet staff or the site's operators):

    * ``cordoned``: bool; a cordoned site gets no new placements.
    * ``labels``: ``{key: value}`` with Kubernetes label syntax (key ``[prefix/]name``, prefix a
      DNS subdomain, name and value at most 63 characters of ``[A-Za-z0-9-_.]`` starting and
      ending alphanumeric; the value may be empty); replaces the stored labels whole.
    * ``overrides``: a JSON merge patch (RFC 7386) of the stored ``{"artifact_repository":
      {...any object...}, "artifact_store": {"endpoint", "bucket", "credentials_secret",
      "region", "proxy"}, "gpu_node_selector": {label: value},
      "image_registry_mirror": "registry.example.org"}``:
      the keys sent are merged in, ``null`` deletes a key, the keys not sent are kept.
      ``artifact_store`` is where the site keeps step outputs, written in full into the step
      workflows that read them elsewhere; removing or moving it while a run placed at the site
      is active or recent is refused unless ``force`` is true.
    * ``refusal_grace_seconds``: seconds a step Karmada refuses at this site (cordoned,
      tainted, no cluster matching its affinity, its Work refused by the member) waits before
      it is placed elsewhere; ``null``: ``PORTAL_FAILOVER_GRACE_SECONDS``.

    Everything else (capacity, readiness, region...) comes from Karmada and is read-only.
    """

    labels = LabelMapField(required=False)
    overrides = OverridesField(required=False, allow_null=True)
    force = serializers.BooleanField(
        write_only=True,
        required=False,
        default=False,
        help_text="Remove or move the artifact store even while runs placed at the site are "
        "active or recent.",
    )
    capabilities = serializers.ListField(child=serializers.CharField(), read_only=True)
    schedulable = serializers.BooleanField(read_only=True)
    capacity = serializers.SerializerMethodField()
    refusal_grace_seconds = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=7 * 24 * 3600
    )
    taints = serializers.JSONField(
        read_only=True, help_text="The Karmada Cluster's spec.taints (a cordon is one)"
    )

    class Meta:
        model = Site
        fields = [
            "name",
            "region",
            "zone",
            "provider",
            "labels",
            "capabilities",
            "sync_mode",
            "ready",
            "ready_changed_at",
            "cordoned",
            "schedulable",
            "overrides",
            "force",
            "capacity",
            "refusal_grace_seconds",
            "taints",
            "last_sync",
        ]
        read_only_fields = [
            "name",
            "region",
            "zone",
            "provider",
            "sync_mode",
            "ready",
            "ready_changed_at",
            "last_sync",
        ]

    @extend_schema_field(SiteCapacitySerializer)
    def get_capacity(self, site: Site) -> dict[str, dict[str, int]]:
        return {
            "cpu": _capacity(site.cpu_allocatable, site.cpu_allocated),
            "memory": _capacity(site.memory_allocatable, site.memory_allocated),
            "gpu": _capacity(site.gpu_allocatable, site.gpu_allocated),
            "pods": _capacity(site.pods_allocatable, site.pods_allocated),
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        detail: dict[str, list[str]] = {}
        if "labels" in attrs:
            detail.update(problems_detail("labels", label_map_problems(attrs["labels"])))
        # ``overrides`` is a patch: the merged result is checked where it is merged, under the
        # site's lock (``sites.services.site_update``).
        if attrs.get("overrides") is not None and not isinstance(attrs["overrides"], dict):
            detail["overrides"] = ["Must be an object: a JSON merge patch of the overrides."]
        if detail:
            raise serializers.ValidationError(detail)
        return attrs


class SiteChangeSerializer(serializers.Serializer[dict[str, Any]]):
    """One changed leaf of a site: ``op`` add (no ``old``), remove (no ``new``) or replace."""

    path = serializers.CharField(help_text="Dotted: overrides.artifact_store.bucket")
    op = serializers.ChoiceField(choices=["add", "remove", "replace"])
    old = serializers.JSONField(required=False)
    new = serializers.JSONField(required=False)


class SitePatchAnswerSerializer(SiteSerializer):
    """The site after a PATCH, with what the PATCH changed (empty: nothing)."""

    changes = SiteChangeSerializer(many=True, read_only=True)

    class Meta(SiteSerializer.Meta):
        fields = [*SiteSerializer.Meta.fields, "changes"]


# --- Datasets -------------------------------------------------------------------------------


class DatasetReplicaSerializer(StrictFieldsMixin, serializers.ModelSerializer[DatasetReplica]):
    site = NameRelatedField(queryset=Site.objects.all())
    uri = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="")
    bytes = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, required=False, default=0)
    state = serializers.ChoiceField(
        choices=ReplicaState.choices, required=False, default=ReplicaState.READY
    )

    class Meta:
        model = DatasetReplica
        fields = ["site", "uri", "bytes", "state"]
        # The pair is unique, but the whole list is checked (and replaced) by the parent.
        validators: list[Any] = []


@extend_schema_field({"type": "array", "items": {"type": "string"}, "example": ["eu-west"]})
class RegionListField(serializers.JSONField):
    pass


class DatasetSerializer(StrictFieldsMixin, serializers.ModelSerializer[Dataset]):
    """A dataset and its replicas (copies at sites).

    ``project`` is the project's name (null: a fleet-wide dataset, fleet staff only).
    ``replicas`` is written whole: a PATCH that carries it replaces every replica, in one
    transaction with the other fields. ``state`` defaults to ``Ready``. ``residency`` lists the
    regions the data may be read in (empty: anywhere).
    """

    project = NameRelatedField(queryset=Project.objects.all(), allow_null=True, required=False)
    name = serializers.CharField(max_length=253)
    uri_prefix = serializers.CharField(max_length=1024, required=False, allow_blank=True)
    bytes = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, required=False)
    format = serializers.CharField(max_length=63, required=False, allow_blank=True)
    residency = RegionListField(required=False)
    replicas = DatasetReplicaSerializer(many=True, required=False)

    class Meta:
        model = Dataset
        fields = [
            "id",
            "name",
            "project",
            "uri_prefix",
            "bytes",
            "format",
            "residency",
            "replicas",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]

    def validate_name(self, value: str) -> str:
        others = Dataset.objects.filter(name=value)
        if self.instance is not None:
            others = others.exclude(pk=self.instance.pk)
        if others.exists():
            raise serializers.ValidationError("A dataset with this name already exists.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        detail: dict[str, list[str]] = {}
        if "residency" in attrs:
            detail.update(problems_detail("residency", region_list_problems(attrs["residency"])))
        seen: set[int] = set()
        for index, replica in enumerate(attrs.get("replicas", [])):
            # A PATCH is partial, and DRF skips the required fields of nested items then; but
            # the list is written whole, so each replica needs its site (defaults: ReplicaInput).
            if "site" not in replica:
                detail[f"replicas[{index}].site"] = ["This field is required."]
                continue
            if replica["site"].pk in seen:
                detail[f"replicas[{index}].site"] = ["The dataset already has a replica here."]
            seen.add(replica["site"].pk)
        if detail:
            raise serializers.ValidationError(detail)
        if "replicas" in attrs:
            attrs["replicas"] = [ReplicaInput(**replica) for replica in attrs["replicas"]]
        return attrs
