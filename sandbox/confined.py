"""File operations the sandbox does as root on folders a step could write to (a pod's folder,
its volumes, a bucket), confined beneath a base folder.

A step may leave symbolic links anywhere it can write, and a claim's folder is shared with
pods that run at the same time. So nothing here opens a path by name: each component is
opened relative to its parent's descriptor with ``O_NOFOLLOW``, a link is followed only when
it stays beneath the base (as the kubelet resolves a ``subPath``, pkg/volume/util/subpath/
subpath_linux.go: ``safeOpenSubPath``, "subpath %q not within volume path %q"), and a link
swapped in between two steps makes the operation fail instead of leaving the base.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

MAX_LINKS = 40  # as the kernel's ELOOP
MAX_DEPTH = 256  # folders walked (one descriptor each), far beyond any real artifact
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


class Escape(OSError):
    """A path that leads out of its base (through `..` or a symbolic link)."""


def parts_of(rel: str) -> list[str]:
    """The components of a path taken relative to its base (`..` kept, `.` and `/` dropped)."""
    return [p for p in rel.split("/") if p not in ("", ".")]


def open_base(base: Path, *, create: bool = False) -> int:
    """The base folder itself (created when asked), never through a link at its last
    component."""
    if create:
        base.mkdir(parents=True, exist_ok=True)
    return os.open(base, _DIR)


def _step(fd: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=fd)
        return os.open(name, _DIR, dir_fd=fd)


def open_dir(base: int, rel: str | list[str], *, create: bool = False, follow: bool = True) -> int:
    """A descriptor of the folder `rel` beneath the folder `base` (a descriptor, not closed
    here). Links are followed only while they stay beneath `base` (never an absolute link, never
    above it), and not at all with ``follow=False``; missing folders are made with
    ``create``. Raises Escape when `rel` leads out, OSError as the system says otherwise."""
    todo = parts_of(rel) if isinstance(rel, str) else list(rel)
    stack = [os.dup(base)]
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise Escape(errno.EXDEV, "leads out of its folder", name)
                os.close(stack.pop())
                continue
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=stack[-1])
                links += 1
                if not follow or target.startswith("/") or links > MAX_LINKS:
                    raise Escape(errno.EXDEV, f"symbolic link to {target} leads out", name)
                todo = parts_of(target) + todo
                continue
            stack.append(_step(stack[-1], name, create))
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


def locate(base: int, rel: str, *, create: bool = False) -> tuple[int, str]:
    """(descriptor of the parent folder, last name) of `rel` beneath `base`: the parent
    resolved as `open_dir` does, and a link at the last component followed too while it stays
    beneath. The name is "" when `rel` is a folder reached with `..` or the base itself."""
    parts = parts_of(rel)
    for _ in range(MAX_LINKS + 1):
        if not parts or parts[-1] == "..":
            return open_dir(base, parts, create=create), ""
        parent = open_dir(base, parts[:-1], create=create)
        name = parts[-1]
        st = lstat_at(parent, name)
        if st is None or not stat.S_ISLNK(st.st_mode):
            return parent, name
        target = os.readlink(name, dir_fd=parent)
        os.close(parent)
        if target.startswith("/"):
            raise Escape(errno.EXDEV, f"symbolic link to {target} leads out", name)
        parts = parts[:-1] + parts_of(target)
    raise Escape(errno.ELOOP, "too many levels of symbolic links", rel)


def lstat_at(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name or ".", dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_file(parent: int, name: str, limit: int | None = None) -> bytes:
    """A regular file's bytes (at most `limit`), never through a link."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", name)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read() if limit is None else f.read(limit)
    finally:
        os.close(fd)


def _clear(parent: int, name: str) -> None:
    """Remove what is at `name` (a file, a link or a whole folder), never following a link."""
    st = lstat_at(parent, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        for entry in list(os.scandir(fd)):
            _clear(fd, entry.name)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def clear(parent: int, name: str) -> None:
    """Remove what is at `name` (a file, a link or a whole folder), never following a link."""
    _clear(parent, name)


def create_file(parent: int, name: str) -> int:
    """A new, empty regular file at `name` (whatever was there goes), opened for writing."""
    _clear(parent, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, 0o644, dir_fd=parent)


def write_file(parent: int, name: str, data: bytes) -> None:
    fd = create_file(parent, name)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_dir(parent: int, name: str) -> int:
    """The folder `name` (made when missing, replacing anything else there), opened; the
    folder `parent` itself when `name` is ""."""
    if not name:
        return os.open(".", _DIR, dir_fd=parent)
    st = lstat_at(parent, name)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        _clear(parent, name)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent)
    return os.open(name, _DIR, dir_fd=parent)


def link_stays_inside(rel_dir: list[str], target: str) -> bool:
    """Whether a link at `rel_dir/<name>` (components relative to the artifact's top)
    pointing at `target` stays inside the artifact: relative, and never above its top, counted
    without collapsing `..` at the root as a path normaliser would (tarfile's "data" filter
    refuses the same links: absolute ones and those that lead outside)."""
    if not target or target.startswith("/"):
        return False
    depth = len(rel_dir)
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


def walk(parent: int, name: str) -> Iterator[tuple[list[str], str, os.stat_result, int]]:
    """Every entry of the file or folder `name` beneath `parent`, top first: (components
    relative to the top, link target or "", its lstat, a descriptor of the entry's parent
    folder valid during the step). Links are reported, never followed."""

    def entries(fd: int, rel: list[str]) -> Iterator[tuple[list[str], str, os.stat_result, int]]:
        if len(rel) > MAX_DEPTH:
            raise OSError(errno.ELOOP, "folders nested too deeply", "/".join(rel[:3]) + "/...")
        for entry in sorted(os.scandir(fd), key=lambda e: e.name):
            st = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            path = [*rel, entry.name]
            target = os.readlink(entry.name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else ""
            yield path, target, st, fd
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(entry.name, _DIR, dir_fd=fd)
                try:
                    yield from entries(sub, path)
                finally:
                    os.close(sub)

    st = os.stat(name or ".", dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return
    yield [], "", st, parent
    if stat.S_ISDIR(st.st_mode):
        top = os.open(name or ".", _DIR, dir_fd=parent)
        try:
            yield from entries(top, [])
        finally:
            os.close(top)


def copy(src_parent: int, src_name: str, dst_parent: int, dst_name: str) -> None:
    """Copy a file or a folder: regular files and folders as they are, links only when they
    stay inside what is copied (as links), anything else (links out, devices, fifos,
    sockets) left out."""
    dirs: dict[tuple[str, ...], int] = {}
    try:
        for rel, target, st, fd in walk(src_parent, src_name):
            name = rel[-1] if rel else src_name
            if not rel:
                if stat.S_ISDIR(st.st_mode):
                    dirs[()] = make_dir(dst_parent, dst_name)
                elif stat.S_ISREG(st.st_mode):
                    _copy_file(fd, name, dst_parent, dst_name)
                continue
            into = dirs.get(tuple(rel[:-1]))
            if into is None:
                continue  # inside a folder that was left out
            if stat.S_ISDIR(st.st_mode):
                dirs[tuple(rel)] = make_dir(into, name)
            elif stat.S_ISREG(st.st_mode):
                _copy_file(fd, name, into, name)
            elif stat.S_ISLNK(st.st_mode) and link_stays_inside(rel[:-1], target):
                _clear(into, name)
                os.symlink(target, name, dir_fd=into)
    finally:
        for fd in dirs.values():
            os.close(fd)


def _copy_file(src_parent: int, src_name: str, dst_parent: int, dst_name: str) -> None:
    src = os.open(src_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_parent)
    try:
        mode = os.fstat(src).st_mode
        if not stat.S_ISREG(mode):
            return
        dst = create_file(dst_parent, dst_name)
        try:
            # Its permission bits (an executable stays one), never set-user or set-group ids.
            os.fchmod(dst, stat.S_IMODE(mode) & 0o777)
            while chunk := os.read(src, _CHUNK):
                os.write(dst, chunk)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def tar_gz(src_parent: int, src_name: str, arcname: str, out: io.BufferedIOBase) -> None:
    """A .tgz of a file or a folder, as `copy` would copy it (links only when they stay
    inside), with its top entry named `arcname` as Argo's tarball has it."""
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for rel, target, st, fd in walk(src_parent, src_name):
            name = rel[-1] if rel else src_name
            info = tarfile.TarInfo("/".join([arcname, *rel]))
            info.mtime = int(st.st_mtime)
            info.mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                with os.fdopen(src, "rb") as f:
                    info.size = os.fstat(f.fileno()).st_size
                    tar.addfile(info, _Exactly(f, info.size))
            elif stat.S_ISLNK(st.st_mode) and rel and link_stays_inside(rel[:-1], target):
                info.type = tarfile.SYMTYPE
                info.linkname = target
                tar.addfile(info)


class _Exactly(io.RawIOBase):
    """`size` bytes of a file that may change while it is read: padded or cut, so the tar
    stays well formed."""

    def __init__(self, f: io.BufferedReader, size: int) -> None:
        self.f, self.left = f, size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n) if n else b""
        data += b"\0" * (n - len(data))
        self.left -= len(data)
        return data


def chown_tree(parent: int, name: str, uid: int) -> None:
    """Give the file or folder `name` and everything in it to `uid`, never through a link."""
    for rel, _target, _st, fd in walk(parent, name):
        entry = rel[-1] if rel else (name or ".")
        os.chown(entry, uid, uid, dir_fd=fd, follow_symlinks=False)
