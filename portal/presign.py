"""Pre-signed reads: a step that reads an artifact another site wrote gets an S3 SigV4
pre-signed GET for exactly that object, never the repository's keys.

The URL is made with botocore's own signer (``S3SigV4QueryAuth``, what
``generate_presigned_url`` uses), so it is what S3, MinIO or any S3-compatible repository
checks. It reaches the step as an Argo ``http`` artifact: Argo's ``s3`` driver signs its own
requests with keys from a Secret and has no field for a pre-signed URL
(``workflow/artifacts/s3/s3.go``: ``ArtifactDriver{AccessKey, SecretKey, ...}``), while its
``http`` driver GETs the URL as given (``workflow/artifacts/http/http.go``: ``Load`` does
``http.NewRequest("GET", inputArtifact.HTTP.URL, nil)``). The URL lives as long as the step
may run: its deadline, bounded to S3's limit of seven days, and one hour by default.

Where an output is comes from what Argo recorded: an output with its own ``s3`` endpoint and
bucket is read where it was written; a key-only output (the step's default repository) is
resolved against the repository the producer's step workflow used
(``status.artifactRepositoryRef.artifactRepository``, Argo's ``ArtifactRepositoryRefStatus``),
and only when the member recorded none against the inventory's repository of its site."""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

DEFAULT_EXPIRY_SECONDS = 3600
# S3 refuses a SigV4 pre-signed URL valid for longer than seven days (X-Amz-Expires).
MAX_EXPIRY_SECONDS = 7 * 24 * 3600
DEFAULT_REGION = "us-east-1"  # Argo's s3 driver's default when a location names none
# The key of a unit's recorded outputs holding the repository its step workflow used.
REPOSITORY_KEY = "artifactRepository"


@dataclass(frozen=True)
class Location:
    """One object in one S3 repository."""

    endpoint: str
    bucket: str
    key: str
    region: str = DEFAULT_REGION
    insecure: bool = True  # Argo's ``insecure``: plain http to the endpoint

    @property
    def url(self) -> str:
        scheme = "http" if self.insecure else "https"
        # Path-style, as Argo's s3 driver addresses a repository by endpoint (MinIO's default).
        return f"{scheme}://{self.endpoint}/{self.bucket}/{urllib.parse.quote(self.key)}"


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str


def expiry_for(deadline_seconds: float | None) -> int:
    """How long a step's pre-signed URL lives: its deadline (the run's time left) when it has
    one, bounded to 1 s .. 7 days; one hour without one."""
    if deadline_seconds is None:
        return DEFAULT_EXPIRY_SECONDS
    return max(1, min(int(deadline_seconds) + 1, MAX_EXPIRY_SECONDS))


def presigned_url(location: Location, keys: Keys, *, method: str = "GET", expires: int) -> str:
    """A SigV4 query-signed URL for ``method`` on exactly ``location``, valid ``expires``
    seconds from now."""
    if not 1 <= expires <= MAX_EXPIRY_SECONDS:
        raise ValueError(f"expires must be 1..{MAX_EXPIRY_SECONDS} seconds, not {expires}")
    signer = S3SigV4QueryAuth(
        Credentials(keys.access_key, keys.secret_key), "s3", location.region, expires=expires
    )
    request = AWSRequest(method=method, url=location.url)
    signer.add_auth(request)
    return str(request.url)


def location_of(
    artifact: Mapping[str, Any],
    recorded_repository: Mapping[str, Any] | None,
    site_store: Mapping[str, Any] | None,
) -> Location | None:
    """Where an output artifact Argo recorded is: its own full ``s3`` location; else its key
    in the repository the producer's step workflow used; else in its site's repository of the
    inventory. ``None``: not an S3 artifact, or nowhere known."""
    s3 = artifact.get("s3")
    if not isinstance(s3, Mapping) or not s3.get("key"):
        return None
    key = str(s3["key"])
    for source in (s3, (recorded_repository or {}).get("s3"), site_store):
        if isinstance(source, Mapping) and source.get("endpoint") and source.get("bucket"):
            return Location(
                endpoint=str(source["endpoint"]),
                bucket=str(source["bucket"]),
                key=key,
                region=str(source.get("region") or DEFAULT_REGION),
                insecure=bool(source.get("insecure", True)),
            )
    return None


def http_artifact(artifact: Mapping[str, Any], url: str) -> dict[str, Any]:
    """The input artifact a reader gets: the same name, path and mode, the object as an
    ``http`` artifact at its pre-signed URL (no ``s3`` and so no Secret reference)."""
    kept = {k: v for k, v in artifact.items() if k not in ("s3", "from", "fromExpression")}
    return {**kept, "http": {"url": url}}


class KeyCache:
    """Each repository's keys, read from its Secret on the control plane at most once per
    ``ttl`` seconds: a fan-out's thousand reads sign with one read of the Secret, and a
    rotated Secret is used within ``ttl``."""

    def __init__(self, read: Callable[[str], Mapping[str, str]], ttl: float = 60.0) -> None:
        self._read = read
        self._ttl = ttl
        self._lock = threading.Lock()
        self._found: dict[str, tuple[float, Keys]] = {}

    def keys(self, secret: str) -> Keys:
        now = time.monotonic()
        with self._lock:
            hit = self._found.get(secret)
            if hit is not None and now - hit[0] < self._ttl:
                return hit[1]
        data = self._read(secret)
        keys = Keys(str(data.get("accessKey", "")), str(data.get("secretKey", "")))
        if not keys.access_key or not keys.secret_key:
            raise KeyError(f"Secret {secret} holds no accessKey and secretKey")
        with self._lock:
            self._found[secret] = (now, keys)
        return keys


def sign_inputs(
    artifacts: list[Any],
    stores: Mapping[str, Mapping[str, Any]],
    keys: Callable[[str], Keys],
    expires: int,
    site: str | None = None,
) -> list[Any]:
    """A step workflow's argument artifacts with each one held in a repository of the fleet
    (``stores``: by site, ``endpoint``, ``bucket``, ``credentials_secret``) turned into an
    ``http`` artifact at a pre-signed GET for that object. Others (a public URL, git, a
    repository the fleet does not know) are left as written. An input in the repository of
    the step's own ``site`` (known: placed at submission) stays an ``s3`` location read with
    that site's own Secret, which is on its member: Argo's s3 driver reads a directory (an
    unarchived folder of keys) where a single pre-signed GET cannot."""
    secret_of = {
        (str(s.get("endpoint")), str(s.get("bucket"))): str(s["credentials_secret"])
        for s in stores.values()
        if s.get("endpoint") and s.get("bucket") and s.get("credentials_secret")
    }
    out: list[Any] = []
    for artifact in artifacts:
        s3 = artifact.get("s3") if isinstance(artifact, Mapping) else None
        where = location_of(artifact, None, None) if isinstance(s3, Mapping) else None
        secret = secret_of.get((where.endpoint, where.bucket)) if where else None
        if where is None or secret is None:
            out.append(artifact)
            continue
        own = stores.get(site or "") or {}
        if (own.get("endpoint"), own.get("bucket")) == (where.endpoint, where.bucket):
            location = {
                **dict(artifact["s3"]),
                "accessKeySecret": {"name": secret, "key": "accessKey"},
                "secretKeySecret": {"name": secret, "key": "secretKey"},
            }
            out.append({**artifact, "s3": location})
            continue
        url = presigned_url(where, keys(secret), expires=expires)
        out.append(http_artifact(artifact, url))
    return out
