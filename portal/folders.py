"""What an unarchived folder output holds, asked of the repository it is in.

Argo saves a directory output with ``archive: none`` as one object per file under
``<key>/`` and loads it by listing that prefix (``workflow/artifacts/s3/s3.go``: ``Load``
tries ``GetFile``, and on ``NoSuchKey`` asks ``IsDirectory`` then ``GetDirectory``, which
lists ``filepath.Clean(key) + "/"`` recursively and fetches each object to its path relative
to the prefix). A pre-signed URL names one object, and the step that reads it holds no key to
list with, so the portal lists for it, signing a HeadObject and ListObjectsV2 with the
repository's keys it holds (botocore's SigV4 signer, as any S3 client): the reader then gets
one pre-signed GET per object, each at its relative path under the folder.

A repository's ``proxy`` (the inventory's ``artifact_store.proxy``) is the HTTP proxy the
control plane reaches its endpoint through when it cannot reach it directly."""

from __future__ import annotations

import posixpath
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode_sequence

from portal.presign import Keys, Location

TIMEOUT = 30.0
_NS = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}


class ListingFailed(Exception):
    """The repository did not say what the folder holds (unreachable, or an S3 error)."""


def _send(
    method: str, location: Location, keys: Keys, query: dict[str, str], proxy: str | None
) -> tuple[int, bytes]:
    """One signed request on ``location`` (its key, or the bucket with ``query``)."""
    url = location.url if location.key else location.url.rstrip("/")
    if query:
        url += "?" + percent_encode_sequence(query)
    request = AWSRequest(method=method, url=url)
    S3SigV4Auth(Credentials(keys.access_key, keys.secret_key), "s3", location.region).add_auth(
        request
    )
    sent = urllib.request.Request(
        url, method=method, headers={k: str(v) for k, v in request.headers.items()}
    )
    proxies = {"http": proxy, "https": proxy} if proxy else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    try:
        with opener.open(sent, timeout=TIMEOUT) as res:
            return int(res.status), res.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ListingFailed(f"{method} {url.split('?')[0]}: {exc}") from None


def _error(status: int, body: bytes) -> str:
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return str(status)
    return f"{status} {root.findtext('Code') or ''}: {root.findtext('Message') or ''}".strip()


def folder_keys(location: Location, keys: Keys, proxy: str | None = None) -> list[str] | None:
    """The relative paths of the objects of the folder at ``location`` (sorted), as Argo's
    ``GetDirectory`` would fetch them; ``None`` when the key is an object itself (Argo loads
    the file) or neither an object nor a prefix (Argo fails with the original ``NoSuchKey``,
    which the reader's pre-signed GET of the key gives it)."""
    status, body = _send("HEAD", location, keys, {}, proxy)
    if 200 <= status < 300:
        return None
    if status != 404:
        raise ListingFailed(f"HEAD s3://{location.bucket}/{location.key}: {_error(status, body)}")
    prefix = posixpath.normpath(location.key) + "/"
    bucket = Location(location.endpoint, location.bucket, "", location.region, location.insecure)
    found: list[str] = []
    token = ""
    while True:
        query = {"list-type": "2", "prefix": prefix}
        if token:
            query["continuation-token"] = token
        status, body = _send("GET", bucket, keys, query, proxy)
        if not 200 <= status < 300:
            why = _error(status, body)
            raise ListingFailed(f"ListObjectsV2 s3://{location.bucket}/{prefix}: {why}")
        root = ET.fromstring(body)
        found += [e.text or "" for e in root.findall("s:Contents/s:Key", _NS)]
        token = root.findtext("s:NextContinuationToken", default="", namespaces=_NS)
        if root.findtext("s:IsTruncated", namespaces=_NS) != "true" or not token:
            break
    # A key ending in "/" is a folder marker some clients write, not a file.
    relative = sorted(k[len(prefix) :] for k in found if not k.endswith("/"))
    return relative or None
