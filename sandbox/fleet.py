"""Fleet files: the member clusters the sandbox starts with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandbox import quantity

DEMO_FLEET = Path(__file__).parent / "fleets" / "demo.yaml"
DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110"}
# What a member's LimitRange gives a container that sets no limit of its own (`default`) and
# no request (`defaultRequest`); a site's `limitRange` replaces it, resource by resource.
DEFAULT_LIMIT_RANGE: dict[str, dict[str, str]] = {
    "default": {"memory": "1Gi", "ephemeral-storage": "2Gi"},
}
LIMIT_RANGE_RESOURCES = ("memory", "ephemeral-storage")
DEFAULT_BUCKET_QUOTA = "10Gi"
# The pods one Workflow may have at once at a member (a ResourceQuota on `pods`, as a member
# would give each tenant); the fleet file's `podsPerWorkflow` sets it per site.
DEFAULT_PODS_PER_WORKFLOW = 100
REPORT_SECRETS_DEFAULT = ("KubeCredentials", "KubeImpersonator")


@dataclass
class Site:
    name: str
    region: str = ""
    zone: str = ""
    # The Cluster's failure zones; a fleet file gives `zones`, or one `zone`.
    zones: tuple[str, ...] = ()
    provider: str = ""
    sync_mode: str = "Push"
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)
    nodes: int = 1
    capacity: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    bucket: str = ""
    kubernetes_version: str = "v1.31.2"
    # -- execution: the site's artifact repository ----------------------------------------
    # {endpoint?, credentialsSecret?, readableFrom?: [site, ...]}
    artifacts: dict[str, Any] = field(default_factory=dict)
    # karmada-agent's `--report-secrets` (pull mode only); its default reports both.
    report_secrets: tuple[str, ...] = REPORT_SECRETS_DEFAULT
    # The member's LimitRange for containers: {"default": {...}, "defaultRequest": {...}} in
    # bytes; None: the fleet's `execution.limitRange`, else DEFAULT_LIMIT_RANGE.
    limit_range: dict[str, dict[str, float]] | None = None
    pods_per_workflow: int = DEFAULT_PODS_PER_WORKFLOW
    # The member's Argo controller's POD_NAMES (workflow/util/pod_name.go): v2, Argo's
    # default, or v1 (pods named by node id).
    pod_names: str = "v2"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Site:
        name = str(d["name"])
        if d.get("reportSecrets") is not None and d.get("syncMode", "Push") != "Pull":
            # A flag of karmada-agent: a push-mode site has no agent to pass it to.
            raise ValueError(f"site {name}: reportSecrets applies to syncMode Pull only")
        site = cls(
            name=name,
            region=str(d.get("region", "")),
            zone=str(d.get("zone", "")),
            zones=tuple(str(z) for z in d.get("zones") or ([d["zone"]] if d.get("zone") else [])),
            provider=str(d.get("provider", "")),
            sync_mode=_sync_mode(d.get("syncMode", "Push"), name),
            labels={str(k): str(v) for k, v in (d.get("labels") or {}).items()},
            taints=list(d.get("taints") or []),
            nodes=int(d.get("nodes", 1)),
            capacity=quantity.parse_map(d.get("capacity") or DEFAULT_CAPACITY),
            baseline=quantity.parse_map(d.get("baseline")),
            bucket=str(d.get("bucket") or f"{name}-artifacts"),
            kubernetes_version=str(d.get("kubernetesVersion", "v1.31.2")),
            artifacts=dict(d.get("artifacts") or {}),
            report_secrets=_report_secrets(d.get("reportSecrets"), name),
            limit_range=parse_limit_range(d.get("limitRange"), f"site {name}"),
            pods_per_workflow=_positive(d.get("podsPerWorkflow"), DEFAULT_PODS_PER_WORKFLOW, name),
            pod_names=_pod_names(d.get("podNames", "v2"), name),
        )
        site.bucket_quota  # noqa: B018 - refused when the fleet file is read, not at a write
        return site

    # -- execution ----------------------------------------------------------------------------
    @property
    def artifact_endpoint(self) -> str:
        return str(self.artifacts.get("endpoint") or f"s3.{self.name}.sandbox.invalid")

    @property
    def artifact_region(self) -> str:
        """The region a request to the repository is signed for (`artifacts.region`, else the
        site's region, else S3's default us-east-1)."""
        return str(self.artifacts.get("region") or self.region or "us-east-1")

    @property
    def artifact_secret(self) -> str:
        return str(self.artifacts.get("credentialsSecret") or f"{self.name}-artifacts-credentials")

    @property
    def bucket_quota(self) -> int:
        """The bucket's hard quota in bytes (`artifacts.quota`, as `mc quota set --size`)."""
        raw = self.artifacts.get("quota", DEFAULT_BUCKET_QUOTA)
        try:
            value = int(quantity.parse(raw))
        except ValueError:
            raise ValueError(f"site {self.name}: artifacts.quota {raw!r} is not a size") from None
        if value <= 0:
            raise ValueError(f"site {self.name}: artifacts.quota must be more than 0")
        return value

    def artifacts_readable_from(self, site: str) -> bool:
        return site == self.name or site in (self.artifacts.get("readableFrom") or [])

    def cluster_object(self) -> dict[str, Any]:
        """The Cluster object as karmada-aggregated-apiserver would hold it after `join`."""
        labels = dict(self.labels)
        labels.setdefault("topology.kubernetes.io/region", self.region)
        labels.setdefault("topology.kubernetes.io/zone", self.zones[0] if self.zones else "")
        spec: dict[str, Any] = {
            "apiEndpoint": f"https://{self.name}.sandbox.invalid:6443",
            "syncMode": self.sync_mode,
            "provider": self.provider,
            "region": self.region,
            "id": f"sandbox-{self.name}",
        }
        # `karmadactl join --cluster-zones` and karmada-agent fill `spec.zones`
        # (pkg/karmadactl/join/join.go, cmd/agent/app/agent.go); `spec.zone` is deprecated and
        # never set by either (pkg/apis/cluster/v1alpha1/types.go).
        if self.zones:
            spec["zones"] = list(self.zones)
        # `karmadactl join` (Push) always creates the impersonator secret. karmada-agent (Pull)
        # reports it unless `--report-secrets` leaves it out: its default is
        # "KubeCredentials,KubeImpersonator" (cmd/agent/app/options/options.go), and
        # generateClusterInControllerPlane (cmd/agent/app/agent.go) then sets
        #   if opts.IsKubeImpersonatorEnabled() {
        #       cluster.Spec.ImpersonatorSecretRef = &clusterv1alpha1.LocalSecretReference{
        # with the name `<cluster>-impersonator` (pkg/util/names/names.go). Without it the
        # cluster proxy has no credentials for the cluster.
        if self.sync_mode == "Push" or "KubeImpersonator" in self.report_secrets:
            spec["impersonatorSecretRef"] = {
                "namespace": "karmada-cluster",
                "name": f"{self.name}-impersonator",
            }
        if self.taints:
            spec["taints"] = self.taints
        return {
            "apiVersion": "cluster.karmada.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": self.name, "labels": labels},
            "spec": spec,
        }


def parse_limit_range(value: Any, where: str) -> dict[str, dict[str, float]] | None:
    """A LimitRange's container `default` and `defaultRequest` (memory, ephemeral-storage).
    As the API server defaults a LimitRange, a `default` without its `defaultRequest` is the
    request too (SetDefaults_LimitRange, pkg/apis/core/v1/defaults.go)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"default", "defaultRequest"}:
        raise ValueError(f"{where}: limitRange takes default and defaultRequest only")
    out: dict[str, dict[str, float]] = {}
    for key in ("default", "defaultRequest"):
        block = value.get(key) or {}
        if not isinstance(block, dict) or set(block) - set(LIMIT_RANGE_RESOURCES):
            raise ValueError(f"{where}: limitRange.{key} takes memory and ephemeral-storage")
        try:
            out[key] = {str(k): quantity.parse(v) for k, v in block.items()}
        except ValueError:
            raise ValueError(f"{where}: limitRange.{key} holds a value that is no size") from None
    for k, v in out["default"].items():
        out["defaultRequest"].setdefault(k, v)
    return out


def _positive(value: Any, default: int, site: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"site {site}: podsPerWorkflow must be a whole number >= 1")
    return int(value)


def _report_secrets(value: Any, site: str) -> tuple[str, ...]:
    """`reportSecrets` of a pull-mode site, as karmada-agent's `--report-secrets`: a list (or
    comma-separated string) of KubeCredentials and KubeImpersonator, or None."""
    if value is None:
        return REPORT_SECRETS_DEFAULT
    items = value.split(",") if isinstance(value, str) else value
    names = tuple(str(i).strip() for i in items) if isinstance(items, list) else ()
    if names == ("None",):
        return ()
    if not names or any(n not in REPORT_SECRETS_DEFAULT for n in names):
        raise ValueError(
            f"site {site}: reportSecrets must be KubeCredentials, KubeImpersonator (or both), "
            f"or None, not {value!r}"
        )
    return names


def _pod_names(value: Any, site: str) -> str:
    if value not in ("v1", "v2"):
        raise ValueError(f"site {site}: podNames must be v1 or v2 (Argo's POD_NAMES)")
    return str(value)


def _sync_mode(value: Any, site: str) -> str:
    """`syncMode` of a site: Push (the control plane reaches the member) or Pull (an agent in
    the member reaches the control plane)."""
    if value not in ("Push", "Pull"):
        raise ValueError(f"site {site}: syncMode must be Push or Pull, not {value!r}")
    return str(value)


def load_fleet(path: Path | None = None) -> list[Site]:
    data = yaml.safe_load((path or DEMO_FLEET).read_text()) or {}
    return [Site.from_dict(s) for s in data.get("sites", [])]


# -- execution ----------------------------------------------------------------------------------
@dataclass
class Execution:
    """The fleet file's `execution:` block: image mappings and the node status size above
    which a member Workflow's nodes are stored compressed (Argo's default is 1 MiB,
    workflow/packer/packer.go)."""

    images: list[dict[str, str]] | None = None
    # `simulated:` what a step whose image is not executable here ends as, by image pattern
    # (`succeed`, `fail` or `refuse`); unlisted images: `refuse` when the step fetches a URL,
    # else `succeed` (sandbox/simulated.py)
    simulated: list[dict[str, str]] | None = None
    max_node_status_bytes: int = 1024 * 1024
    step_wallclock_seconds: float = 600.0
    # The most one output parameter may hold (see pods.py); 256 KiB, the bound Argo's
    # executor puts on a step's `result`.
    max_parameter_bytes: int = 256 * 1024
    limit_range: dict[str, dict[str, float]] = field(
        default_factory=lambda: parse_limit_range(DEFAULT_LIMIT_RANGE, "default") or {}
    )
    # How often the kubelet's eviction manager measures a pod's ephemeral storage (real
    # seconds; the kubelet's housekeeping period is 10 s).
    eviction_interval_seconds: float = 1.0


def load_execution(path: Path | None = None) -> Execution:
    data = yaml.safe_load((path or DEMO_FLEET).read_text()) or {}
    block = data.get("execution") or {}
    images = block.get("images")
    return Execution(
        images=[{"match": str(i["match"]), "runner": str(i["runner"])} for i in images]
        if images is not None
        else None,
        simulated=[
            {"match": str(i["match"]), "outcome": str(i["outcome"])}
            for i in block.get("simulated") or []
        ],
        max_node_status_bytes=int(block.get("maxNodeStatusBytes", 1024 * 1024)),
        step_wallclock_seconds=float(block.get("stepWallclockSeconds", 600)),
        max_parameter_bytes=int(block.get("maxParameterBytes", 256 * 1024)),
        limit_range=parse_limit_range(block.get("limitRange", DEFAULT_LIMIT_RANGE), "execution")
        or {},
        eviction_interval_seconds=float(block.get("evictionIntervalSeconds", 1.0)),
    )
