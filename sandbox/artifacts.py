"""Per-site artifact repositories (a folder per bucket) and the artifact drivers a step can
use with no internet: s3 (these buckets), raw, http (loopback only) and git (fails).

Keys are Argo's default key format `{{workflow.name}}/{{pod.name}}/<artifact>.tgz`; outputs
are tarred and gzipped unless `archive: none` (workflow/executor/executor.go), and the node's
status keeps only the key, as Argo >= 3 does (the repository comes from the workflow's
artifactRepositoryRef).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ArtifactError(Exception):
    """An artifact that cannot be loaded or saved; the message is what the node shows."""


@dataclass
class Repository:
    bucket: str
    endpoint: str
    root: Path  # <data dir>/buckets/<bucket>
    quota: int | None = None  # bytes: the bucket's hard quota

    def path(self, key: str) -> Path:
        clean = os.path.normpath("/" + key).lstrip("/")
        return self.root / clean

    def save(self, src: Path, key: str, archive: bool) -> None:
        if self.quota is None:
            self._write(src, key, archive)
            return
        with _QUOTA_LOCK:
            # The object as it is (archive: none) would pass the quota: refused unwritten.
            if not archive and self.used() + bucket_usage(src) > self.quota:
                raise ArtifactError(QUOTA_EXCEEDED)
            self._write(src, key, archive)
            if self.used() > self.quota:
                # A tarball's size is known once written: taken back, as the PUT is refused.
                dest = self.path(key)
                if dest.is_dir():
                    shutil.rmtree(dest, ignore_errors=True)
                else:
                    dest.unlink(missing_ok=True)
                raise ArtifactError(QUOTA_EXCEEDED)

    def used(self) -> int:
        return bucket_usage(self.root) if self.root.exists() else 0

    def _write(self, src: Path, key: str, archive: bool) -> None:
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not archive:
            # `archive: none`: a file as it is, a folder as keys under the prefix.
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copyfile(src, dest)
            return
        with tarfile.open(dest, "w:gz") as tar:
            tar.add(src, arcname=src.name)

    def load(self, key: str, dest: Path) -> None:
        src = self.path(key)
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
            return
        if not src.is_file():
            # The message an S3 GetObject of a missing key gives (workflow/artifacts/s3/s3.go).
            raise ArtifactError(
                f"failed to load artifact: s3://{self.bucket}/{key}: "
                "The specified key does not exist. (NoSuchKey)"
            )
        unpack(src.read_bytes(), dest)


# A write past a bucket's quota, as MinIO refuses it (cmd/api-errors.go):
#   ErrAdminBucketQuotaExceeded: {
#       Code:           "XMinioAdminBucketQuotaExceeded",
#       Description:    "Bucket quota exceeded",
#       HTTPStatusCode: http.StatusBadRequest,
# and minio-go's error reads as its message; the code is kept beside it, as NoSuchKey is.
QUOTA_EXCEEDED = "Bucket quota exceeded (XMinioAdminBucketQuotaExceeded)"
_QUOTA_LOCK = threading.Lock()


def bucket_usage(path: Path) -> int:
    """Bytes of the objects under `path` (a file or a folder), as a bucket counts them."""
    if not path.is_dir():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def unpack(data: bytes, dest: Path) -> None:
    """A .tgz with one entry becomes `dest` (file or folder), as Argo's untar does; anything
    that is not a tarball is copied as it is."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")  # noqa: SIM115 - closed below
    except tarfile.TarError:
        dest.write_bytes(data)
        return
    with tar, tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tar.extractall(tmp, filter="data")
        entries = os.listdir(tmp)
        if len(entries) == 1:
            shutil.move(os.path.join(tmp, entries[0]), dest)
        else:
            shutil.move(tmp, dest)
            Path(tmp).mkdir()


def fetch_http(url: str, dest: Path) -> None:
    host = urllib.parse.urlparse(url).hostname or ""
    if host not in LOOPBACK:
        # The pod has no network: what a failed DNS lookup reads like.
        raise ArtifactError(
            f'Get "{url}": dial tcp: lookup {host}: Temporary failure in name resolution'
        )
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            data = resp.read()
    except OSError as exc:
        raise ArtifactError(f'Get "{url}": {exc}') from exc
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)


def safe_inside(root: Path, path: Path) -> Path | None:
    """`path` with its symlinks resolved, if that stays inside `root` (a step may leave a
    symlink to a host file where its output should be)."""
    with contextlib.suppress(OSError):
        real = path.resolve()
        if real.is_relative_to(root.resolve()) and (real.exists() or real.is_symlink()):
            return real
    return None


def is_archive_none(art: dict[str, Any]) -> bool:
    return (art.get("archive") or {}).get("none") is not None
