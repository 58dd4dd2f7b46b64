"""Where each container path of one pod lives on the host, and how the sandbox reaches it
as root without being led out of the pod's folders by a link a step left there."""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterator
from pathlib import Path

from sandbox import confined
from sandbox.pod import Mount


def container_path(path: str) -> str:
    """An absolute, normalised container path (POSIX keeps a leading `//` as it is)."""
    return posixpath.normpath("/" + path.lstrip("/"))


class PodLayout:
    """Where each container path of one pod lives on the host. The sandbox reads and writes
    there as root, so every path is resolved beneath the folder it lives in (the pod's root
    file system or one volume), never through a link that leads out (sandbox/confined.py)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounts: list[Mount] = []

    def add(self, host: Path, dest: str, readonly: bool = False, fd: int | None = None) -> None:
        dest = posixpath.normpath(dest)
        if any(m.dest == dest for m in self.mounts):
            if fd is not None:
                os.close(fd)
            return
        self.mounts.append(Mount(host, dest, readonly, fd))

    def close(self) -> None:
        for m in self.mounts:
            if m.fd is not None:
                os.close(m.fd)
                m.fd = None

    def locate(self, path: str) -> tuple[Path | int, str]:
        """(the folder a container path lives in, the path beneath it): under a volume mount,
        or in the pod's root file system."""
        path = container_path(path)
        best: tuple[int, Mount, str] | None = None
        for m in self.mounts:
            if m.fd is None and m.host.is_file():
                continue  # a file the sandbox mounts (the hosts file): its copy in the layer
            if path == m.dest or path.startswith(m.dest.rstrip("/") + "/"):
                rel = posixpath.relpath(path, m.dest)
                if best is None or len(m.dest) > best[0]:
                    best = (len(m.dest), m, "" if rel == "." else rel)
        if best is not None:
            m = best[1]
            return (m.fd if m.fd is not None else m.host), best[2]
        # The system folders are the host's, bound read-only over the pod's own layer: what
        # the sandbox reads or writes for a step there is that layer, never the host's files.
        return self.root / "fs", path.lstrip("/")

    @contextlib.contextmanager
    def at(self, path: str, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of the parent folder, name) of a container path, its folders made
        with `create`. OSError (Escape) when it leads out."""
        base, rel = self.locate(path)
        fd = os.dup(base) if isinstance(base, int) else confined.open_base(base, create=create)
        try:
            found = confined.locate(fd, rel, create=create)
        finally:
            os.close(fd)
        try:
            yield found
        finally:
            os.close(found[0])
