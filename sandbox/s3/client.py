"""How a step's executor reaches an artifact repository: S3 requests signed with SigV4 by
botocore's signer (`S3SigV4Auth`), sent to the repository's listener with the repository's
endpoint name as Host, as Argo's wait and init containers reach S3 through minio-go
(workflow/artifacts/s3/s3.go). `RemoteBucket` loads and saves artifacts as Argo's S3 driver
does: a `.tgz` (or a file as it is, `archive: none`) at the key, a folder (`archive: none`) as
one object per file under `<key>/` (`PutDirectory`), read back by listing the prefix when the
key itself is no object (`IsDirectory`, `GetDirectory`)."""

from __future__ import annotations

import http.client
import os
import stat
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import percent_encode_sequence

from sandbox import confined
from sandbox.artifacts import ArtifactError, unpack
from sandbox.s3.errors import S3Error, parse_error

TIMEOUT = 60.0  # seconds without a byte before a request fails
CHUNK = 1 << 20


class Unreachable(Exception):
    """The listener did not answer (the message is Go's dial error)."""


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str


@dataclass
class Response:
    status: int
    reason: str
    body: bytes


def send(
    address: tuple[str, int],
    host: str,
    method: str,
    target: str,
    headers: dict[str, str],
    body: IO[bytes] | None = None,
    length: int = 0,
    into: IO[bytes] | None = None,
) -> Response:
    """One HTTP request to a listener, `host` as its Host header; the answer's body goes to
    `into` on success when given."""
    conn = http.client.HTTPConnection(address[0], address[1], timeout=TIMEOUT, blocksize=CHUNK)
    try:
        sent = {**headers, "Host": host}
        if body is not None or method == "PUT":
            sent["Content-Length"] = str(length)
        try:
            conn.request(method, target, body=body, headers=sent)
            res = conn.getresponse()
        except ConnectionRefusedError:
            raise Unreachable(
                f"dial tcp {address[0]}:{address[1]}: connect: connection refused"
            ) from None
        except OSError as exc:
            raise Unreachable(f"dial tcp {address[0]}:{address[1]}: {exc}") from None
        if into is not None and 200 <= res.status < 300:
            while chunk := res.read(CHUNK):
                into.write(chunk)
            return Response(res.status, res.reason, b"")
        return Response(res.status, res.reason, res.read())
    finally:
        conn.close()


class RemoteBucket:
    """A bucket of a repository, reached over S3 with one key pair."""

    def __init__(
        self,
        bucket: str,
        endpoint: str,
        region: str,
        address: tuple[str, int],
        keys: Keys,
    ) -> None:
        self.bucket = bucket
        self.endpoint = endpoint
        self.region = region
        self.address = address
        self.keys = keys

    # -- S3 operations -----------------------------------------------------------------------
    def request(
        self,
        method: str,
        key: str = "",
        query: dict[str, str] | None = None,
        body: IO[bytes] | None = None,
        length: int = 0,
        into: IO[bytes] | None = None,
    ) -> Response:
        """A signed request; S3Error for an error answer."""
        path = f"/{self.bucket}" + (f"/{urllib.parse.quote(key, safe='/~')}" if key else "")
        qs = percent_encode_sequence(query) if query else ""
        url = f"http://{self.endpoint}{path}" + (f"?{qs}" if qs else "")
        req = AWSRequest(method=method, url=url, data=body if body is not None else b"")
        S3SigV4Auth(
            Credentials(self.keys.access_key, self.keys.secret_key), "s3", self.region
        ).add_auth(req)
        if body is not None:
            body.seek(0)
        headers = {k: str(v) for k, v in req.headers.items()}
        res = send(
            self.address,
            self.endpoint,
            method,
            path + (f"?{qs}" if qs else ""),
            headers,
            body,
            length,
            into,
        )
        if not 200 <= res.status < 300:
            raise parse_error(res.body, res.status)
        return res

    def put(self, key: str, path: Path) -> None:
        with path.open("rb") as f:
            self.request("PUT", key, body=f, length=os.fstat(f.fileno()).st_size)

    def _put_file_as_it_is(self, src: tuple[int, str], key: str) -> bool:
        """An unarchived output that is a regular file PUT straight from the step's file (no
        copy of it first: a copy of a large output cost as much as the upload); False when
        it is not one (a folder, a link), to be saved by copying what may be saved."""
        try:
            fd = os.open(src[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src[0])
        except OSError:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return False
        with os.fdopen(fd, "rb") as f:
            try:
                self.request("PUT", key, body=f, length=st.st_size)
            except (S3Error, Unreachable) as exc:
                raise ArtifactError(str(exc)) from None
        return True

    def list_keys(self, prefix: str) -> list[str]:
        import xml.etree.ElementTree as ET

        keys: list[str] = []
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            root = ET.fromstring(self.request("GET", query=query).body)
            ns = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}
            keys += [e.text or "" for e in root.findall("s:Contents/s:Key", ns)]
            token = root.findtext("s:NextContinuationToken", default="", namespaces=ns)
            if root.findtext("s:IsTruncated", namespaces=ns) != "true" or not token:
                return keys

    # -- artifacts -----------------------------------------------------------------------------
    def save(self, src: tuple[int, str], key: str, archive: bool, arcname: str) -> None:
        """Store the file or folder `src` (parent descriptor, name) at `key`: a .tgz whose top
        entry is `arcname`, or with `archive: none` a file as it is and a folder as one object
        per file under `<key>/`. Links that leave the artifact are left out (a link that
        stays inside is stored as what it points at: S3 keeps no links)."""
        if not archive and self._put_file_as_it_is(src, key):
            return
        with tempfile.TemporaryDirectory(prefix="sandbox-put-") as tmp:
            if archive:
                out_path = Path(tmp) / "artifact.tgz"
                with out_path.open("wb") as out:
                    confined.tar_gz(src[0], src[1], arcname, out)
                self._put(key, out_path)
                return
            top = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            try:
                confined.copy(src[0], src[1], top, "a")
            finally:
                os.close(top)
            copied = Path(tmp) / "a"
            if copied.is_file() and not copied.is_symlink():
                self._put(key, copied)
                return
            base = copied.resolve()
            for dirpath, _dirs, files in os.walk(copied):
                for name in sorted(files):
                    path = Path(dirpath) / name
                    real = path.resolve()
                    if not real.is_relative_to(base) or not real.is_file():
                        continue
                    rel = path.relative_to(copied).as_posix()
                    self._put(f"{key.rstrip('/')}/{rel}", real)

    def _put(self, key: str, path: Path) -> None:
        try:
            self.put(key, path)
        except S3Error as exc:
            raise ArtifactError(str(exc)) from None
        except Unreachable as exc:
            raise ArtifactError(str(exc)) from None

    def load(self, key: str, dest: tuple[int, str]) -> None:
        """Put the object (or the objects under `<key>/`) at `dest` (parent descriptor,
        name), unpacking a .tgz as Argo does."""
        with tempfile.TemporaryFile(prefix="sandbox-get-") as buf:
            self._load_object(key, buf, dest)

    def _load_object(self, key: str, buf: IO[bytes], dest: tuple[int, str]) -> None:
        try:
            self.request("GET", key, into=buf)
        except Unreachable as exc:
            raise ArtifactError(
                f"failed to load artifact: s3://{self.bucket}/{key}: {exc}"
            ) from None
        except S3Error as exc:
            if exc.code != "NoSuchKey":
                raise self._failed(key, exc) from None
            prefix = key.rstrip("/") + "/"
            keys = self.list_keys(prefix)
            if not keys:
                raise self._failed(key, exc) from None
            self._load_folder(prefix, keys, dest)
            return
        buf.seek(0)
        unpack(buf, dest)

    def _load_folder(self, prefix: str, keys: list[str], dest: tuple[int, str]) -> None:
        top = confined.make_dir(dest[0], dest[1])
        try:
            for k in keys:
                parts = confined.parts_of(k[len(prefix) :])
                if not parts:
                    continue
                parent = confined.open_dir(top, parts[:-1], create=True, follow=False)
                try:
                    fd = confined.create_file(parent, parts[-1])
                    with os.fdopen(fd, "wb") as out:
                        self.request("GET", k, into=out)
                finally:
                    os.close(parent)
        except S3Error as exc:
            raise self._failed(prefix, exc) from None
        finally:
            os.close(top)

    def _failed(self, key: str, exc: S3Error) -> ArtifactError:
        # The s3 driver's message for an S3 error, with S3's own code beside its message.
        return ArtifactError(f"failed to load artifact: s3://{self.bucket}/{key}: {exc}")


__all__ = ["Keys", "RemoteBucket", "Unreachable", "send"]
