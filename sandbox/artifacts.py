"""Per-site buckets (a folder per bucket, served by the site's S3 listener, sandbox/s3/) and
the artifact drivers a step can use with no internet besides s3 (sandbox/s3/client.py): raw,
http (from the Workflow's own network namespace) and git (fails); and Argo's untar.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sandbox import confined
from sandbox.executor import host_python
from sandbox.s3.errors import S3Error

# S3's bucket naming rules (3 to 63 characters: lower-case letters, digits, '.' and '-').
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
FETCH_TIMEOUT = 30.0  # seconds without a byte before an http input fails
FETCH_WALLCLOCK = 600.0  # seconds for a whole http input, however slowly it comes


class ArtifactError(Exception):
    """An artifact that cannot be loaded or saved; the message is what the node shows."""


@dataclass
class Repository:
    """A bucket: a folder whose files are objects, served only by its repository's S3
    listener (sandbox/s3/listener.py); steps never reach it otherwise. Every read and write
    resolves inside it, never through a symbolic link, or fails."""

    bucket: str
    endpoint: str
    root: Path  # <data dir>/buckets/<bucket>
    quota: int | None = None  # bytes: the bucket's hard quota

    def __post_init__(self) -> None:
        if not BUCKET_NAME.match(self.bucket) or ".." in self.bucket:
            # What S3 answers (and where a bucket is a folder, what keeps it one).
            raise ArtifactError(
                f"bucket {self.bucket!r}: InvalidBucketName: The specified bucket is not valid."
            )

    def _parts(self, key: str) -> list[str]:
        # `..` stays at the bucket's top.
        parts = [p for p in posixpath.normpath("/" + key).split("/") if p]
        if not parts:
            raise S3Error("NoSuchKey")
        return parts

    def used(self) -> int:
        """Bytes of the objects in the bucket (links counted as themselves, never followed)."""
        total = 0
        for dirpath, _dirs, files in os.walk(self.root):  # os.walk follows no links
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total

    # -- what the repository's S3 listener serves (sandbox/s3/listener.py) -------------------
    def get_path(self, key: str) -> tuple[int, int] | None:
        """An open descriptor of the object at `key` and its size; None when there is no
        such object (a folder is no object; nothing is reached through a link)."""
        try:
            parts = self._parts(key)
            base = confined.open_base(self.root)
        except (S3Error, OSError):
            return None
        try:
            parent = confined.open_dir(base, parts[:-1], follow=False)
        except OSError:
            return None
        finally:
            os.close(base)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError:
            return None
        finally:
            os.close(parent)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        return fd, st.st_size

    def put_file(self, key: str, path: Path, size: int) -> None:
        """Store the file at `path` as the object `key`; past the quota nothing is stored and
        the PUT is refused as MinIO refuses it."""
        parts = self._parts(key)
        with _QUOTA_LOCK:
            if self.quota is not None:
                old = self.get_path(key)
                replaced = 0
                if old is not None:
                    os.close(old[0])
                    replaced = old[1]
                if self.used() - replaced + size > self.quota:
                    raise S3Error("XMinioAdminBucketQuotaExceeded")
            base = confined.open_base(self.root, create=True)
            try:
                parent = confined.open_dir(base, parts[:-1], create=True, follow=False)
            finally:
                os.close(base)
            try:
                path.chmod(0o644)
                try:
                    # The spooled body becomes the object at once (same file system): nothing
                    # is copied, and a reader never sees half an object.
                    confined.clear(parent, parts[-1])
                    os.rename(path, parts[-1], dst_dir_fd=parent)
                except OSError:
                    dst = confined.create_file(parent, parts[-1])
                    with os.fdopen(dst, "wb") as out, path.open("rb") as src:
                        shutil.copyfileobj(src, out, 1 << 20)
            finally:
                os.close(parent)

    def delete_key(self, key: str) -> None:
        with contextlib.suppress(S3Error, OSError):
            parts = self._parts(key)
            base = confined.open_base(self.root)
            try:
                parent = confined.open_dir(base, parts[:-1], follow=False)
            finally:
                os.close(base)
            try:
                st = confined.lstat_at(parent, parts[-1])
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    os.unlink(parts[-1], dir_fd=parent)
            finally:
                os.close(parent)

    def list_keys(self, prefix: str) -> list[tuple[str, int]]:
        """Every object whose key starts with `prefix`, in key order, with its size (links
        are not objects and are never followed)."""
        out: list[tuple[str, int]] = []
        if not self.root.is_dir():
            return out
        base = confined.open_base(self.root)
        try:
            for rel, _target, st, _fd in confined.walk(base, ""):
                if rel and stat.S_ISREG(st.st_mode):
                    key = "/".join(rel)
                    if key.startswith(prefix):
                        out.append((key, st.st_size))
        finally:
            os.close(base)
        return sorted(out)


# One write at a time measures a bucket against its quota.
_QUOTA_LOCK = threading.Lock()


def unpack(data: bytes | IO[bytes], dest: tuple[int, str]) -> None:
    """A .tgz with one entry becomes `dest` (file or folder), as Argo's untar does; anything
    that is not a tarball is copied as it is. It is unpacked in a private folder first, with
    tarfile's "data" filter (no absolute links, nothing outside), then copied over."""
    src = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        tar = tarfile.open(fileobj=src, mode="r:*")  # noqa: SIM115 - closed below
    except tarfile.TarError:
        src.seek(0)
        fd = confined.create_file(dest[0], dest[1])
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        return
    with tar, tempfile.TemporaryDirectory(prefix="sandbox-untar-") as tmp:
        try:
            tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise ArtifactError(f"failed to load artifact: untar: {exc}") from exc
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            entries = os.listdir(fd)
            if len(entries) == 1:
                confined.copy(fd, entries[0], dest[0], dest[1])
            else:
                confined.copy(fd, "", dest[0], dest[1])
        finally:
            os.close(fd)


# Run as the pod's user, inside the Workflow's network namespace: urllib with the http(s)
# handlers only (no file:, ftp:, data: or proxies from the environment), redirects followed as
# Go's client does, which can only lead to what that namespace reaches.
_FETCH = """
import socket, sys, urllib.error, urllib.parse, urllib.request
url = sys.argv[1]
u = urllib.parse.urlsplit(url)
class Redirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        global u
        u = urllib.parse.urlsplit(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)
opener = urllib.request.OpenerDirector()
for h in (urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(), Redirect(),
          urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor()):
    opener.add_handler(h)
try:
    with opener.open(url, timeout=float(sys.argv[2])) as r:
        while chunk := r.read(1 << 20):
            sys.stdout.buffer.write(chunk)
except urllib.error.HTTPError as e:
    sys.exit(f"{e.code} {e.reason}")
except (urllib.error.URLError, OSError) as e:
    r = getattr(e, "reason", e)
    port = u.port or (443 if u.scheme == "https" else 80)
    if isinstance(r, ConnectionRefusedError):
        sys.exit(f"dial tcp {u.hostname}:{port}: connect: connection refused")
    if isinstance(r, socket.gaierror):
        sys.exit(f"dial tcp: lookup {u.hostname}: {r.strerror}")
    if isinstance(r, OSError) and r.strerror:
        sys.exit(f"dial tcp {u.hostname}:{port}: connect: {r.strerror.lower()}")
    sys.exit(str(r))
"""


def fetch_http(url: str, dest: tuple[int, str], netns: int, uid: int) -> None:
    """An `http` input artifact fetched as the pod would fetch it: from the Workflow's own
    network namespace (its loopback and nothing else), as the pod's user, never from the
    sandbox's host namespace."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        # Go's net/http (workflow/artifacts/http/http.go uses its client).
        raise ArtifactError(f'Get "{url}": unsupported protocol scheme "{scheme}"')
    argv = ["nsenter", f"--net=/proc/{netns}/ns/net", "--", "setpriv", f"--reuid={uid}"]
    argv += [f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    argv += [host_python(), "-I", "-S", "-c", _FETCH, url, str(FETCH_TIMEOUT)]
    fd = confined.create_file(dest[0], dest[1])
    with os.fdopen(fd, "wb") as out:
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                check=False,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},  # nothing of the sandbox's own
                timeout=FETCH_WALLCLOCK,
            )
        except subprocess.TimeoutExpired:
            raise ArtifactError(
                f'Get "{url}": context deadline exceeded (Client.Timeout or context '
                "cancellation while reading body)"
            ) from None
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
        raise ArtifactError(f'Get "{url}": {reason[0]}')


def is_archive_none(art: dict[str, Any]) -> bool:
    return (art.get("archive") or {}).get("none") is not None
