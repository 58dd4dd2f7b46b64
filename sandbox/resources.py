"""The resource types the sandbox serves, as the discovery documents describe them."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sandbox.printer import AGE, Column


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
    # What ``kubectl get`` shows after the name (sandbox/printer.py): a CRD's
    # additionalPrinterColumns as its CRD declares them (none: an Age column), a built-in
    # kind's the columns of kube-apiserver's printer for it.
    printer_columns: tuple[Column, ...] = field(default=())
    # Whether `{plural}/status` is served. CRDs that declare `subresources: {}` (Argo's
    # Workflow, Karmada's policies) have none: their main endpoint stores `status` as sent.
    status_subresource: bool = True
    # Whether a PUT without metadata.resourceVersion overwrites whatever is stored (the
    # registry strategy's AllowUnconditionalUpdate). Where upstream says no (a Lease), such a
    # PUT is 422 Invalid: an election must never take a lease it has not read.
    unconditional_update: bool = True

    @cached_property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @cached_property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

# Printer columns are (name, jsonPath, type), copied from the additionalPrinterColumns of the
# upstream CRDs (Karmada's policy.karmada.io_propagationpolicies.yaml and the others, Argo's
# full argoproj.io_workflows.yaml) or, for the built-in kinds and Karmada's aggregated
# Cluster, from their servers' printers.
PROPAGATION_COLUMNS: tuple[Column, ...] = (
    ("CONFLICT-RESOLUTION", ".spec.conflictResolution", "string"),
    ("PRIORITY", ".spec.priority", "string"),
    ("AGE", ".metadata.creationTimestamp", "date"),
)
RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "namespace",
        ("ns",),
        printer_columns=(("Status", ".status.phase", "string"), AGE),
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
            AGE,
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
        printer_columns=PROPAGATION_COLUMNS,
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
        printer_columns=PROPAGATION_COLUMNS,
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
            ("SCHEDULED", '.status.conditions[?(@.type=="Scheduled")].status', "string"),
            ("FULLYAPPLIED", '.status.conditions[?(@.type=="FullyApplied")].status', "string"),
            ("AGE", ".metadata.creationTimestamp", "date"),
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
            ("Age", ".status.startedAt", "date"),
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
            ("WORKLOAD-KIND", ".spec.workload.manifests[*].kind", "string"),
            ("APPLIED", '.status.conditions[?(@.type=="Applied")].status', "string"),
            ("AGE", ".metadata.creationTimestamp", "date"),
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
            AGE,
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
        printer_columns=(
            ("TARGET-API-VERSION", ".spec.target.apiVersion", "string"),
            ("TARGET-KIND", ".spec.target.kind", "string"),
            ("AGE", ".metadata.creationTimestamp", "date"),
        ),
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
        printer_columns=(("Type", ".type", "string"), AGE),
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
    # Leader election of the portal's watcher and beat (sandbox/coordination.py): kubernetes
    # pkg/registry/coordination/lease/strategy.go (no status, AllowUnconditionalUpdate false);
    # columns of kube-apiserver's printer (pkg/printers/internalversion/printers.go).
    ResourceType(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        True,
        "lease",
        (),
        printer_columns=(("Holder", ".spec.holderIdentity", "string"), AGE),
        status_subresource=False,
        unconditional_update=False,
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
LEASE = RESOURCE_TYPES[14]
