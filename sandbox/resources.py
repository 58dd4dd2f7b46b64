"""The resource types the sandbox serves, as the discovery documents describe them."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[tuple[str, str, str], ...] = field(default=())
    # Whether `{plural}/status` is served. CRDs that declare `subresources: {}` (Argo's
    # Workflow, Karmada's policies) have none: their main endpoint stores `status` as sent.
    status_subresource: bool = True

    @cached_property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @cached_property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

# Printer columns are (header, jsonPath, type) as the upstream CRDs / aggregated apiserver define.
RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "namespace",
        ("ns",),
        printer_columns=(("Status", ".status.phase", "string"),),
    ),
    ResourceType(
        "cluster.karmada.io",
        "v1alpha1",
        "clusters",
        "Cluster",
        False,
        "cluster",
        (),
        printer_columns=(
            ("Version", ".status.kubernetesVersion", "string"),
            ("Mode", ".spec.syncMode", "string"),
            ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
        ),
    ),
    ResourceType(
        "policy.karmada.io",
        "v1alpha1",
        "propagationpolicies",
        "PropagationPolicy",
        True,
        "propagationpolicy",
        ("pp",),
        status_subresource=False,
    ),
    ResourceType(
        "policy.karmada.io",
        "v1alpha1",
        "clusterpropagationpolicies",
        "ClusterPropagationPolicy",
        False,
        "clusterpropagationpolicy",
        ("cpp",),
        status_subresource=False,
    ),
    ResourceType(
        "policy.karmada.io",
        "v1alpha1",
        "overridepolicies",
        "OverridePolicy",
        True,
        "overridepolicy",
        ("op",),
        status_subresource=False,
    ),
    ResourceType(
        "policy.karmada.io",
        "v1alpha1",
        "clusteroverridepolicies",
        "ClusterOverridePolicy",
        False,
        "clusteroverridepolicy",
        ("cop",),
        status_subresource=False,
    ),
    ResourceType(
        "work.karmada.io",
        "v1alpha2",
        "resourcebindings",
        "ResourceBinding",
        True,
        "resourcebinding",
        ("rb",),
        printer_columns=(
            ("Scheduled", '.status.conditions[?(@.type=="Scheduled")].status', "string"),
            ("FullyApplied", '.status.conditions[?(@.type=="FullyApplied")].status', "string"),
        ),
    ),
    ResourceType(
        "argoproj.io",
        "v1alpha1",
        "workflows",
        "Workflow",
        True,
        "workflow",
        ("wf",),
        printer_columns=(
            ("Status", ".status.phase", "string"),
            ("Message", ".status.message", "string"),
        ),
        status_subresource=False,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        "mutatingwebhookconfiguration",
        (),
        status_subresource=False,
    ),
    ResourceType(
        "work.karmada.io",
        "v1alpha1",
        "works",
        "Work",
        True,
        "work",
        (),
        printer_columns=(
            ("Workload-Kind", ".spec.workload.manifests[0].kind", "string"),
            ("Applied", '.status.conditions[?(@.type=="Applied")].status', "string"),
        ),
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        "event",
        ("ev",),
        printer_columns=(
            ("Type", ".type", "string"),
            ("Reason", ".reason", "string"),
            ("Message", ".message", "string"),
        ),
        status_subresource=False,
    ),
    ResourceType(
        "config.karmada.io",
        "v1alpha1",
        "resourceinterpretercustomizations",
        "ResourceInterpreterCustomization",
        False,
        "resourceinterpretercustomization",
        ("ric",),
        status_subresource=False,
    ),
    # Core kinds a PropagationPolicy may select besides Workflows (karmada-apiserver serves
    # every built-in kind; these are the ones the portal propagates: artifact credentials;
    # ConfigMaps are stored whether or not a policy propagates them: the portal reads Argo's
    # semaphore limits from them).
    ResourceType(
        "",
        "v1",
        "secrets",
        "Secret",
        True,
        "secret",
        (),
        printer_columns=(("Type", ".type", "string"),),
        status_subresource=False,
    ),
    ResourceType(
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        True,
        "configmap",
        ("cm",),
        status_subresource=False,
    ),
)


class Registry:
    def __init__(self, types: tuple[ResourceType, ...] = RESOURCE_TYPES) -> None:
        self.types = types
        self._by_path = {(t.group, t.version, t.plural): t for t in types}
        self._by_kind = {(t.group, t.kind): t for t in types}

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        return self._by_kind.get((group, kind))

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in self.types:
            if t.group:
                versions = out.setdefault(t.group, [])
                if t.version not in versions:
                    versions.append(t.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self.types if t.group == group and t.version == version]


# By position in RESOURCE_TYPES: a new type goes at its end.
WORKFLOW = RESOURCE_TYPES[7]
CLUSTER = RESOURCE_TYPES[1]
NAMESPACE = RESOURCE_TYPES[0]
RESOURCE_BINDING = RESOURCE_TYPES[6]
PROPAGATION_POLICY = RESOURCE_TYPES[2]
CLUSTER_PROPAGATION_POLICY = RESOURCE_TYPES[3]
OVERRIDE_POLICY = RESOURCE_TYPES[4]
CLUSTER_OVERRIDE_POLICY = RESOURCE_TYPES[5]
MUTATING_WEBHOOK = RESOURCE_TYPES[8]
WORK = RESOURCE_TYPES[9]
EVENT = RESOURCE_TYPES[10]
INTERPRETER_CUSTOMIZATION = RESOURCE_TYPES[11]
SECRET = RESOURCE_TYPES[12]
CONFIG_MAP = RESOURCE_TYPES[13]
