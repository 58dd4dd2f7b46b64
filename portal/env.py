"""Typed helpers for reading settings from the environment.

Every helper also honours ``<NAME>_FILE``: a path whose contents are the value, so secrets can be
mounted as files (Docker/Kubernetes secrets) instead of living in the process environment.
"""

from __future__ import annotations

import os
from pathlib import Path


def env(name: str, default: str = "") -> str:
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        return Path(file_path).read_text().strip()
    return os.environ.get(name, default)


def envbool(name: str, default: bool = False) -> bool:
    raw = env(name, "")
    if raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    raw = env(name, "")
    return int(raw) if raw.strip() else default


def envfloat(name: str, default: float) -> float:
    raw = env(name, "")
    return float(raw) if raw.strip() else default


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env(name, default).split(",") if item.strip()]


def private_dir(path: Path) -> Path:
    """``path`` as a folder only its owner can enter (created if missing, tightened if not)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def private_file(path: Path) -> Path:
    """``path`` as a file only its owner can read or write (created empty if missing, tightened
    if not). SQLite creates its journal and WAL files with the database file's mode."""
    fd = os.open(path, os.O_CREAT | os.O_RDONLY, 0o600)
    os.close(fd)
    path.chmod(0o600)
    return path
