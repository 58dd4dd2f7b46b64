"""The fleet's artifact repositories: one S3 listener per site's repository, started with the
fleet (`--execute`), and the key pairs each accepts.

A repository accepts (its "users"):
* the key pair of its site's credential Secret (`artifacts.credentialsSecret`, default
  `<site>-artifacts-credentials`; keys `accessKey` and `secretKey`) as its own member holds it,
  in any namespace: the keys the site's repository was provisioned with, read at each request
  (a rotated Secret takes effect at once, the old pair stops working);
* its site's node identity: the member's Argo controller's default repository is this site's
  bucket with `useSDKCreds: true` (workflow/artifacts/s3/s3.go: credentials from the
  environment, as an instance role gives them), so a step at a site reaches its own
  repository's default bucket without a Secret, and no other repository with that identity.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from sandbox.artifacts import Repository
from sandbox.config import data_root
from sandbox.fleet import Site
from sandbox.host import Host
from sandbox.s3.client import Keys
from sandbox.s3.listener import Endpoint
from sandbox.store import Obj

ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"


class SecretHolder(Protocol):
    """A member cluster as a repository sees it: the objects it holds, Secrets among them."""

    @property
    def objects(self) -> Mapping[tuple[str, str, str], Obj]: ...

    def object_data(self, obj: Obj) -> dict[str, str]: ...


class RepositoriesHost(Host, Protocol):
    @property
    def members(self) -> Mapping[str, SecretHolder]: ...


class Repositories:
    def __init__(self, sb: RepositoriesHost) -> None:
        self.sb = sb
        self._endpoints: dict[str, Endpoint] = {}
        self._node_keys: dict[str, Keys] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        for site in self.sb.sites.values():
            self.of(site)

    def stop(self) -> None:
        with self._lock:
            for ep in self._endpoints.values():
                ep.stop()
            self._endpoints.clear()

    def of(self, site: Site) -> Endpoint:
        """The listener of `site`'s repository (started on first use for a site that joined
        after the fleet file was read)."""
        with self._lock:
            ep = self._endpoints.get(site.name)
            if ep is None:
                root = data_root(self.sb.config)
                ep = Endpoint(
                    site=site.name,
                    endpoint=site.artifact_endpoint,
                    region=site.artifact_region,
                    store=Repository(
                        bucket=site.bucket,
                        endpoint=site.artifact_endpoint,
                        root=root / "buckets" / site.bucket,
                        quota=site.bucket_quota,
                    ),
                    secret_of=functools.partial(self._secret_of, site),
                    new_bucket=functools.partial(self._new_bucket, site),
                    spool=root / "spool" / site.name,
                )
                ep.start()
                self._endpoints[site.name] = ep
            return ep

    def _new_bucket(self, site: Site, name: str) -> Repository | None:
        """A bucket made by CreateBucket at `site`'s repository; None when the name is some
        repository's already (bucket names are global, as S3's are). An invalid name is
        refused as S3 refuses it."""
        from sandbox.artifacts import ArtifactError
        from sandbox.s3.errors import S3Error

        with self._lock:
            taken = {s.bucket for s in self.sb.sites.values()}
            for ep in self._endpoints.values():
                taken |= set(ep.others)
            if name in taken:
                return None
            try:
                return Repository(
                    bucket=name,
                    endpoint=site.artifact_endpoint,
                    root=data_root(self.sb.config) / "buckets" / name,
                    quota=site.bucket_quota,
                )
            except ArtifactError:
                raise S3Error("InvalidBucketName", "The specified bucket is not valid.") from None

    def node_keys(self, site: str) -> Keys:
        """The node identity of a site's steps (accepted by its own repository only)."""
        with self._lock:
            keys = self._node_keys.get(site)
            if keys is None:
                keys = Keys(f"NODE{secrets.token_hex(8).upper()}", secrets.token_urlsafe(30))
                self._node_keys[site] = keys
            return keys

    def site_of_endpoint(self, host: str) -> Site | None:
        """The site whose repository has the endpoint name `host` (no port), if any."""
        host = host.lower()
        return next(
            (s for s in self.sb.sites.values() if s.artifact_endpoint.lower() == host), None
        )

    def _secret_of(self, site: Site, access_key: str) -> str | None:
        node = self.node_keys(site.name)
        if access_key == node.access_key:
            return node.secret_key
        member = self.sb.members.get(site.name)
        if member is None:
            return None
        for (kind, _ns, name), obj in list(member.objects.items()):
            if kind != "Secret" or name != site.artifact_secret:
                continue
            data = member.object_data(obj)
            if data.get(ACCESS_KEY) == access_key and data.get(SECRET_KEY):
                return data[SECRET_KEY]
        return None

    def describe(self) -> list[dict[str, Any]]:
        """Each fleet site's repository: its listener's figures, who may reach it (its own
        site and `readableFrom`) and the Secret whose keys it accepts."""
        return [
            {
                **self.of(s).describe(),
                "readableFrom": [str(x) for x in s.artifacts.get("readableFrom") or []],
                "credentialsSecret": s.artifact_secret,
            }
            for s in self.sb.sites.values()
        ]


__all__ = ["ACCESS_KEY", "SECRET_KEY", "Repositories"]
