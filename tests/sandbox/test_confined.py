"""The executor's root-side file operations (sandbox/confined.py): never led out of their
folder by a link, whatever a step left there."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import confined


@pytest.fixture
def base(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "base"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text("inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("secret")
    (root / "alias").symlink_to("real")
    (root / "abs").symlink_to(tmp_path / "outside")
    (root / "up").symlink_to("../outside")
    (root / "loop").symlink_to("loop")
    fd = confined.open_base(root)
    try:
        yield root, fd
    finally:
        os.close(fd)


def test_links_are_followed_only_while_they_stay_beneath(base: tuple[Path, int]) -> None:
    _root, fd = base
    inner = confined.open_dir(fd, "alias")
    try:
        assert sorted(os.listdir(inner)) == ["f"]
    finally:
        os.close(inner)
    for rel in ("abs", "up", "real/../..", "abs/new", "loop"):
        with pytest.raises(OSError):
            os.close(confined.open_dir(fd, rel, create=True))
    with pytest.raises(confined.Escape):
        os.close(confined.open_dir(fd, "alias", follow=False))
    parent, name = confined.locate(fd, "alias/f")
    try:
        assert confined.read_file(parent, name) == b"inside"
    finally:
        os.close(parent)
    with pytest.raises(confined.Escape):
        confined.locate(fd, "abs")


def test_nothing_is_created_outside(base: tuple[Path, int], tmp_path: Path) -> None:
    _root, fd = base
    with pytest.raises(OSError):
        confined.locate(fd, "abs/planted/x", create=True)
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret"]


@pytest.mark.parametrize(
    ("where", "target", "inside"),
    [
        ([], "real/f", True),
        ([], "../x", False),
        (["a"], "../b", True),
        (["a"], "../../b", False),
        ([], "/etc/passwd", False),
        ([], "a/../../x", False),
        ([], "", False),
    ],
)
def test_which_links_stay_inside_an_artifact(where: list[str], target: str, inside: bool) -> None:
    assert confined.link_stays_inside(where, target) is inside


def test_copies_and_tarballs_keep_only_links_that_stay_inside(
    base: tuple[Path, int], tmp_path: Path
) -> None:
    root, fd = base
    (root / "real" / "f").chmod(0o4755)
    (root / "real" / "same").symlink_to("f")
    (root / "real" / "out").symlink_to(tmp_path / "outside" / "secret")
    (root / "real" / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(root / "real" / "fifo")
    dest = tmp_path / "dest"
    dest.mkdir()
    dfd = confined.open_base(dest)
    try:
        confined.copy(fd, "real", dfd, "copy")
    finally:
        os.close(dfd)
    assert sorted(os.listdir(dest / "copy")) == ["f", "same"]
    assert os.readlink(dest / "copy" / "same") == "f"
    assert (dest / "copy" / "f").stat().st_mode & 0o7777 == 0o755  # executable, not set-uid
    out = io.BytesIO()
    confined.tar_gz(fd, "real", "real", out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        assert sorted(tar.getnames()) == ["real", "real/f", "real/same"]
    # Through a link, nothing is copied at all.
    dfd = confined.open_base(dest)
    try:
        confined.copy(fd, "abs", dfd, "none")
    finally:
        os.close(dfd)
    assert not (dest / "none").exists()


def test_writing_replaces_a_link_instead_of_following_it(
    base: tuple[Path, int], tmp_path: Path
) -> None:
    root, fd = base
    os.symlink(tmp_path / "outside" / "secret", "planted", dir_fd=fd)
    confined.write_file(fd, "planted", b"mine")
    assert (tmp_path / "outside" / "secret").read_text() == "secret"
    assert not os.path.islink(os.path.join(str(root), "planted"))
    uid = 12345
    confined.chown_tree(fd, "", uid)
    assert (tmp_path / "outside" / "secret").stat().st_uid != uid
    assert (root / "real" / "f").stat().st_uid == uid


def test_a_tree_nested_too_deeply_is_an_error_not_a_crash(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    fd = confined.open_base(deep, create=True)
    try:
        os.close(confined.open_dir(fd, "/".join(["d"] * (confined.MAX_DEPTH + 5)), create=True))
        with pytest.raises(OSError, match="nested too deeply"):
            confined.chown_tree(fd, "", os.getuid())
    finally:
        os.close(fd)
