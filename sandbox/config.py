"""The sandbox's configuration (from the command line) and the data folder it implies."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.watchcache import UPPER_BOUND


@dataclass
class Config:
    fleet: Path | None = None
    time_scale: float = 1.0
    crds: list[Path] = field(default_factory=list)
    label_domain: str = "portal.multisite.io"
    default_duration: float = 10.0
    # Events kept per resource for watches that resume (kube-apiserver's watch cache bound).
    event_log_size: int = UPPER_BOUND
    bookmark_interval: float = 30.0
    tick: float = 0.05
    # -- execution: steps really run with --execute; see sandbox/executor.py -------------
    execute: bool = False
    data_dir: Path | None = None
    # -- authorisation (sandbox/authz): RBAC files stored on karmada-apiserver at start and
    # after each reset, those every member holds, and the portal's ServiceAccount.
    rbac: list[Path] = field(default_factory=list)
    member_rbac: list[Path] = field(default_factory=list)
    portal_service_account: str = "portal/portal"
    # Requests without credentials: system:anonymous (True), else the insecure port's superuser.
    anonymous_auth: bool = False

    def annotation(self, name: str) -> str:
        return f"{self.label_domain}/sandbox-{name}"


_DATA: dict[int, Path] = {}


def data_root(config: Config) -> Path:
    """The sandbox's data folder: `--data-dir`, or a temp folder for this process."""
    if config.data_dir is not None:
        root = config.data_dir
    else:
        if id(config) not in _DATA:
            _DATA[id(config)] = Path(tempfile.mkdtemp(prefix="sandbox-data-"))
        root = _DATA[id(config)]
    root.mkdir(parents=True, exist_ok=True)
    # Steps run under their own user ids and must reach their folders.
    root.chmod(0o755)
    return root
