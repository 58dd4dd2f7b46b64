"""A Workflow's artifact repository, as Argo resolves it
(workflow/artifactrepositories/artifactrepositories.go), the credential Secrets its pods
mount, and the main container's log archived to it."""

from __future__ import annotations

from typing import Any

import yaml

from sandbox.argo import archivelogs
from sandbox.argo.containers import NotRunnable
from sandbox.argo.expr import render
from sandbox.argo.run import RunState
from sandbox.artifacts import BUCKET_NAME, ArtifactError
from sandbox.s3.client import RemoteBucket


class ArtifactRepository:
    """Where a Workflow's outputs go: `repo` (None while a Secret it needs is missing), and
    the reference the status shows (`state.repository_ref`)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.repo: RemoteBucket | None = None

    def resolve(self) -> None:
        """The repository outputs go to, as Argo resolves it
        (workflow/artifactrepositories/artifactrepositories.go): the ConfigMap that
        `spec.artifactRepositoryRef` names in the Workflow's namespace, else the namespace's
        `artifact-repositories` default, else the controller's (this site's bucket)."""
        ref = (self.state.obj.get("spec") or {}).get("artifactRepositoryRef")
        name = str((ref or {}).get("configMap") or "artifact-repositories")
        cm = self.state.member.get_object("ConfigMap", self.state.namespace, name)
        if cm is not None:
            annotations = (cm.get("metadata") or {}).get("annotations") or {}
            key = (ref or {}).get("key") or annotations.get(
                "workflows.argoproj.io/default-artifact-repository"
            )
            raw = self.state.member.object_data(cm).get(str(key)) if key else None
            try:
                conf = yaml.safe_load(raw) if raw else None
            except yaml.YAMLError:
                conf = None
            s3 = (conf or {}).get("s3") if isinstance(conf, dict) else None
            if isinstance(s3, dict) and s3.get("bucket"):
                self.repo = self._configured(s3)
                self.state.repository_ref = {
                    "configMap": name,
                    "key": key,
                    "namespace": self.state.namespace,
                    "artifactRepository": conf,
                }
                return
        if ref is not None:
            raise ArtifactError(
                f'failed to find any artifact repository for artifact repository ref "{ref}"'
            )
        self.repo = self.state.member.repository

    def _configured(self, s3: dict[str, Any]) -> RemoteBucket | None:
        """The bucket an artifact repository ConfigMap names, reached as its config says:
        its own `accessKeySecret` / `secretKeySecret` as this member holds them, else this
        site's node identity (Argo's executor then signs with the environment's
        credentials, see `SiteExecution.keys_from`), which only this site's repository
        accepts. None while a Secret it names is not on this member: Argo's controller
        resolves the repository without reading Secrets, and the pods that need it wait for
        the Secret (`_artifact_secrets`)."""
        bucket = str(s3["bucket"])
        if not BUCKET_NAME.match(bucket) or ".." in bucket:
            # What S3 answers (and where a bucket is a folder, what keeps it one).
            raise ArtifactError(
                f"bucket {bucket!r}: InvalidBucketName: The specified bucket is not valid."
            )
        owner = self.state.member.site_of_location(s3) or self.state.member.site
        if not self.state.member.reachable(owner):
            raise ArtifactError(
                f"bucket {bucket}: dial tcp: lookup {owner.artifact_endpoint}: no such host"
            )
        if self.missing_secret(s3):
            return None
        return self.state.member.bucket_of(
            owner, bucket, self.state.member.keys_from(s3, self.state.namespace)
        )

    def conf(self) -> dict[str, Any]:
        conf = (self.state.repository_ref or {}).get("artifactRepository")
        return conf if isinstance(conf, dict) else {}

    def archive_log(self, tmpl: dict[str, Any], node: dict[str, Any], data: bytes) -> str:
        """Save the main container's log as Argo's wait container does when archiveLogs is
        on; a failure is the step's error, as the executor's ``AddError``."""
        key = archivelogs.key_of(tmpl, self.state.name, node["id"])
        try:
            archivelogs.save(self.repo or self.state.member.repository, key, data)
        except (ArtifactError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return f"failed to save logs: {reason}"
        outputs = node.setdefault("outputs", {})
        outputs["artifacts"] = [*(outputs.get("artifacts") or []), archivelogs.output(key)]
        return ""

    def artifact_secrets(
        self, node: dict[str, Any], tmpl: dict[str, Any], scope: dict[str, Any]
    ) -> None:
        """The credential Secrets an input or output artifact's location names are volumes
        of the pod, mounted into its init and wait containers, which read the keys from
        them (workflow/controller/workflowpod.go):
            func createSecretVolumesAndMounts(tmpl *wfv1.Template) (...) {
                ...
                for _, art := range tmpl.Outputs.Artifacts {
                    createSecretVolume(allVolumesMap, art, uniqueKeyMap)
                }
                for _, art := range tmpl.Inputs.Artifacts {
                    createSecretVolume(allVolumesMap, art, uniqueKeyMap)
                }
        (workflow/executor/executor.go, GetSecret: os.ReadFile(filepath.Join(
        common.SecretVolMountPath, accessKeyName, accessKey))). With one missing the kubelet
        cannot mount it, and the pod waits, Pending, until the Secret exists: an output's
        missing Secret stops the step before it runs, as an input's does; it never runs and
        then fails its save."""
        # The outputs as the controller sees them when it creates the pod: the template's,
        # with what is known before the step runs substituted.
        inputs = (node.get("inputs") or {}).get("artifacts") or []
        outputs = render((tmpl.get("outputs") or {}).get("artifacts") or [], scope)
        locations = [art.get("s3") or {} for art in [*inputs, *outputs]]
        # The repository is the pod's archive location (its Secrets mounted too) when an
        # artifact has no location of its own or the log is archived (addArchiveLocation).
        repository = self.conf().get("s3")

        def located(art: dict[str, Any]) -> bool:
            return bool(
                (art.get("s3") or {}).get("endpoint") and (art.get("s3") or {}).get("bucket")
            )

        needs_repository = isinstance(repository, dict) and (
            any(not located(a) for a in inputs if "s3" in a)
            or any(
                not located(a)
                for a in outputs
                if a.get("path") and not a.get("from") and "http" not in a
            )
            or archivelogs.enabled(self.state.obj.get("spec") or {}, tmpl, self.conf())
        )
        if needs_repository and isinstance(repository, dict):
            locations.append(repository)
        for s3 in locations:
            name = self.missing_secret(s3)
            if name:
                raise NotRunnable(
                    f'MountVolume.SetUp failed for volume "{name}" : secret "{name}" not found'
                )
        if needs_repository and isinstance(repository, dict) and self.repo is None:
            # Its Secret has come since the Workflow started.
            self.repo = self._configured(repository)

    def missing_secret(self, s3: dict[str, Any]) -> str | None:
        """The first credential Secret an `s3` location names that this member does not hold
        in the Workflow's namespace."""
        for ref in ("accessKeySecret", "secretKeySecret", "sessionTokenSecret"):
            name = str((s3.get(ref) or {}).get("name") or "")
            if "{{" in name:
                continue  # known only once the step has run: the save will say
            if name and not self.state.member.has_object("Secret", self.state.namespace, name):
                return name
        return None
