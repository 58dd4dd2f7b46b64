"""What the fleet's parts ask of the sandbox that holds them, as protocols.

The sandbox (`core.Sandbox`) builds its controllers, members and endpoints and hands each
itself; each part names here, or beside itself, only what it uses of it, so that no part
imports the sandbox that imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sandbox.config import Config
from sandbox.faults import Faults
from sandbox.fleet import Site
from sandbox.store import Store


class Host(Protocol):
    """The configuration, the apiserver's store, the faults in force and the fleet's sites;
    `poke` wakes the controllers after a change they were not told of by an event."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> Store: ...

    @property
    def faults(self) -> Faults: ...

    @property
    def sites(self) -> Mapping[str, Site]: ...

    def poke(self, everything: bool = False) -> None: ...
