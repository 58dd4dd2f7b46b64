"""What a member needs to really run pods (`--execute`): its folders, its artifact
repository and those it may read, the Secrets and ConfigMaps it holds, and pod logs."""

from __future__ import annotations

import base64
import itertools
import shutil
from collections import OrderedDict
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from sandbox.artifacts import ArtifactError
from sandbox.config import data_root
from sandbox.fleet import DEMO_FLEET, Execution, Site, load_execution
from sandbox.host import Host
from sandbox.pod import Tail
from sandbox.s3.client import Keys, RemoteBucket
from sandbox.s3.repositories import ACCESS_KEY, SECRET_KEY, Repositories
from sandbox.store import Obj

KEPT_LOGS = 500  # pods whose logs a member keeps
_UIDS = itertools.count()


class Marker(Protocol):
    """Karmada's controller as a member's Workflow sees it: told which Workflow changed, so
    that its next pass reflects the member's status."""

    def mark(self, key: tuple[str, str]) -> None: ...


class ArgoHost(Host, Protocol):
    """What a member cluster asks of the sandbox: besides the `Host`'s, the fleet's artifact
    repositories and Karmada's controller to tell of a Workflow's change."""

    @property
    def repositories(self) -> Repositories: ...

    @property
    def karmada(self) -> Marker: ...


def seed_buckets(sb: ArgoHost) -> None:
    """Files a site's bucket holds from the start (`artifacts.seed` in the fleet file: a folder
    beside the fleet file, or beside the shipped fleets, so a copy of the demo fleet keeps its
    data; its contents become keys), as a site's archive would: the demo's Sentinel-2 scene at
    site-a. Kept as plain keys under their prefix, so a step reads a folder with a key-only
    input artifact."""
    fleet = sb.config.fleet or DEMO_FLEET
    for site in sb.sites.values():
        seed = site.artifacts.get("seed")
        if not seed:
            continue
        found = [
            p / str(seed) for p in (fleet.parent, DEMO_FLEET.parent) if (p / str(seed)).is_dir()
        ]
        if not found:
            raise ValueError(f"site {site.name}: artifacts.seed {seed!r} is not a folder")
        src = found[0]
        shutil.copytree(src, data_root(sb.config) / "buckets" / site.bucket, dirs_exist_ok=True)


# The label Argo's controller watches ConfigMaps by (workflow/common/common.go).
CONFIGMAP_TYPE = "workflows.argoproj.io/configmap-type"


class SiteExecution:
    sb: ArgoHost
    name: str
    bucket: str
    objects: dict[tuple[str, str, str], Obj]
    logs: OrderedDict[tuple[str, str], Tail]

    @cached_property
    def execution(self) -> Execution:
        return load_execution(self.sb.config.fleet)

    @property
    def data_dir(self) -> Path:
        return data_root(self.sb.config)

    @property
    def site(self) -> Site:
        return self.sb.sites.get(self.name) or Site(name=self.name, bucket=self.bucket)

    def pod_dir(self, namespace: str, pod: str) -> Path:
        path = self.data_dir / "pods" / self.name / namespace / pod
        path.mkdir(parents=True, exist_ok=True)
        for p in (path.parent.parent.parent, path.parent.parent, path.parent):
            p.chmod(0o755)
        return path

    @staticmethod
    def next_uid() -> int:
        """A user id per pod: the process limit counts one pod's processes, and a pod
        cannot read another pod's folder."""
        return 200000 + next(_UIDS) % 100000

    # -- artifact repositories (reached over S3, sandbox/s3/) --------------------------------
    def bucket_of(self, owner: Site, bucket: str, keys: Keys) -> RemoteBucket:
        """`bucket` at `owner`'s repository, reached through its listener with `keys`."""
        ep = self.sb.repositories.of(owner)
        return RemoteBucket(
            bucket, owner.artifact_endpoint, owner.artifact_region, ep.address, keys
        )

    @property
    def repository(self) -> RemoteBucket:
        """This site's default repository, with the site's node identity (the controller's
        default repository has `useSDKCreds`, see sandbox/s3/repositories.py)."""
        site = self.site
        return self.bucket_of(site, site.bucket, self.sb.repositories.node_keys(self.name))

    def site_of_location(self, s3: dict[str, Any]) -> Site | None:
        """The site whose repository an `s3:` location names (endpoint first, else bucket);
        None when it names none of the fleet's."""
        endpoint = str(s3.get("endpoint") or "").lower()
        bucket = s3.get("bucket")
        sites = [self.site, *self.sb.sites.values()]
        if endpoint:
            host = endpoint.split("://")[-1].split("/")[0].split(":")[0]
            return next((x for x in sites if x.artifact_endpoint.lower() == host), None)
        return next((x for x in sites if bucket and x.bucket == bucket), None)

    def reachable(self, owner: Site) -> bool:
        return owner.name == self.name or owner.artifacts_readable_from(self.name)

    def keys_from(self, s3: dict[str, Any], namespace: str) -> Keys:
        """The key pair a location's `accessKeySecret` / `secretKeySecret` name, read from the
        Secret in the step's namespace on this member, as Argo's executor reads it from the
        pod's namespace (a Secret this member does not hold fails); without
        `accessKeySecret`, this site's node identity, whatever repository the location names.

        Argo reads no Secret at all then (workflow/artifacts/artifacts.go, newDriver):
            if art.S3.AccessKeySecret != nil && art.S3.AccessKeySecret.Name != "" {
                accessKeyBytes, err := ri.GetSecret(ctx, art.S3.AccessKeySecret.Name, ...
        and the client takes the environment's credentials (workflow/artifacts/s3/s3.go,
        GetCredentials):
            case opts.UseSDKCreds:
                return getAWSCredentials(ctx, opts)
            default:
                log.Info(ctx, "Creating minio client using IAM role")
                return credentials.NewIAM(nullIAMEndpoint), nil
        Both are the node's identity here, which only its own site's repository accepts: a
        location naming another site's repository without its Secret is refused there
        (InvalidAccessKeyId), never signed with that repository's credential Secret."""
        ak_ref = s3.get("accessKeySecret") or {}
        if not ak_ref.get("name"):
            return self.sb.repositories.node_keys(self.name)
        sk_ref = s3.get("secretKeySecret") or {"name": ak_ref["name"], "key": SECRET_KEY}
        values = []
        for ref, default_key in ((ak_ref, ACCESS_KEY), (sk_ref, SECRET_KEY)):
            name = str(ref.get("name") or ak_ref["name"])
            obj = self.get_object("Secret", namespace, name)
            if obj is None:
                # kube-apiserver's NotFound for a Secret read from the pod's namespace. A pod
                # whose location names a missing Secret waits for it before it runs
                # (pods.py, `_artifact_secrets`); this is a Secret gone since.
                raise ArtifactError(f'secrets "{name}" not found')
            key = str(ref.get("key") or default_key)
            value = self.object_data(obj).get(key)
            if value is None:
                # kubelet's message for a key the Secret lacks (pkg/kubelet/kubelet_pods.go).
                raise ArtifactError(f"couldn't find key {key} in Secret {namespace}/{name}")
            values.append(value)
        return Keys(values[0], values[1])

    def repository_for(
        self, s3: dict[str, Any], namespace: str, *, saving: bool = False
    ) -> RemoteBucket:
        """The bucket an `s3:` location names: this site's default repository when it names
        no other (and no credentials of its own); another repository only if the fleet lets
        this site reach it, with the credential Secret the location names as this member
        holds it, else this site's node identity (`keys_from`), which that repository
        refuses."""
        endpoint = s3.get("endpoint")
        bucket = s3.get("bucket")
        own = self.site
        names_own = endpoint in (None, "", own.artifact_endpoint) and bucket in (
            None,
            "",
            own.bucket,
        )
        if names_own and not s3.get("accessKeySecret"):
            return self.repository
        owner = self.site_of_location(s3) if not names_own else own
        host = str(endpoint or (owner.artifact_endpoint if owner else f"{bucket}.s3"))
        what = "failed to save artifact" if saving else "failed to load artifact"
        if owner is None or not self.reachable(owner):
            # What Go's resolver answers for a name this site cannot resolve.
            raise ArtifactError(
                f'{what}: Get "https://{host}/{bucket or ""}/'
                f'{s3.get("key", "")}": dial tcp: lookup {host}: no such host'
            )
        try:
            keys = self.keys_from(s3, namespace)
        except ArtifactError as exc:
            raise ArtifactError(f"{what}: {exc}") from None
        return self.bucket_of(owner, str(bucket or owner.bucket), keys)

    # -- objects the member holds (Secrets, ConfigMaps) --------------------------------------
    def put_object(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (str(obj.get("kind")), str(meta.get("namespace") or "default"), str(meta["name"]))
        self.objects[key] = obj

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, namespace, name), None)

    def get_object(self, kind: str, namespace: str, name: Any) -> Obj | None:
        return self.objects.get((kind, namespace, str(name)))

    def has_object(self, kind: str, namespace: str, name: Any) -> bool:
        return self.get_object(kind, namespace, name) is not None

    @staticmethod
    def object_data(obj: Obj) -> dict[str, str]:
        out = {str(k): str(v) for k, v in (obj.get("stringData") or {}).items()}
        for k, v in (obj.get("data") or {}).items():
            if obj.get("kind") == "Secret":
                try:
                    out[str(k)] = base64.b64decode(str(v)).decode()
                except ValueError:
                    out[str(k)] = str(v)
            else:
                out[str(k)] = str(v)
        return out

    def object_value(self, kind: str, namespace: str, name: Any, key: str) -> str | None:
        obj = self.get_object(kind, namespace, name)
        return None if obj is None else self.object_data(obj).get(key)

    def config_map_parameter(
        self, namespace: str, name: Any, key: Any
    ) -> tuple[str | None, str, bool]:
        """(value, error, not found) of a parameter read from a ConfigMap, as Argo's
        controller reads one (workflow/common/configmap.go, GetConfigMapValue): only ConfigMaps
        labelled ``workflows.argoproj.io/configmap-type: Parameter`` are seen at all."""
        obj = self.get_object("ConfigMap", namespace, name)
        if obj is None:
            return (
                None,
                f"ConfigMap '{name}' does not exist. Please make sure it has the label "
                f"{CONFIGMAP_TYPE}: Parameter to be detectable by the controller",
                True,
            )
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(CONFIGMAP_TYPE) != "Parameter":
            return (
                None,
                f"ConfigMap '{name}' needs to have the label {CONFIGMAP_TYPE}: Parameter to "
                "load parameters",
                False,
            )
        value = self.object_data(obj).get(str(key))
        if value is None:
            return None, f"ConfigMap '{name}' does not have the key '{key}'", True
        return value, "", False

    # -- pod logs ----------------------------------------------------------------------------
    def keep_log(self, namespace: str, pod: str, data: Tail) -> None:
        self.logs[(namespace, pod)] = data
        self.logs.move_to_end((namespace, pod))
        while len(self.logs) > KEPT_LOGS:
            self.logs.popitem(last=False)
