"""Datasets indexed for matching what a unit reads (dataset names and data references)."""

from __future__ import annotations

from collections.abc import Iterable

from placement.parser import Unit
from placement.planner.inputs import DatasetInfo

MATCH_CACHE_MAX = 4096


class DataCatalogue:
    """Datasets indexed for matching a unit's dataset names and data references."""

    def __init__(self, datasets: Iterable[DatasetInfo]) -> None:
        self.datasets = tuple(sorted(datasets, key=lambda d: d.name))
        self._projects = {d.project for d in self.datasets if d.project is not None}
        self._scoped: dict[str | None, DataCatalogue] = {}
        self.by_name = {d.name: d for d in self.datasets}
        # Longest prefix first, so the most specific dataset wins a reference.
        self.prefixes = sorted(
            ((d.uri_prefix, d) for d in self.datasets if d.uri_prefix),
            key=lambda p: (-len(p[0]), p[1].name),
        )
        self._cache: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[DatasetInfo, ...]] = {}

    def for_project(self, project: str | None) -> DataCatalogue:
        """The datasets a plan of ``project`` knows of: the fleet-wide ones and the project's
        own (a plan in no project: the fleet-wide ones). Another project's dataset is not
        matched, so a plan says nothing of it (its name, size, replicas or residency), as the
        datasets API shows it to nobody outside that project."""
        if self._projects <= {project}:
            return self
        found = self._scoped.get(project)
        if found is None:
            if len(self._scoped) >= MATCH_CACHE_MAX:
                self._scoped.clear()
            found = DataCatalogue(d for d in self.datasets if d.project in (None, project))
            self._scoped[project] = found
        return found

    def read_by(self, unit: Unit) -> tuple[DatasetInfo, ...]:
        key = (unit.datasets, unit.data_refs)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found: dict[str, DatasetInfo] = {}
        for n in unit.datasets:
            d = self.by_name.get(n)
            if d is not None:
                found[d.name] = d
        for ref in unit.data_refs:
            d = self.by_name.get(ref)
            if d is not None:
                found[d.name] = d
                continue
            for prefix, ds in self.prefixes:
                if ref.startswith(prefix):
                    found[ds.name] = ds
                    break
        result = tuple(sorted(found.values(), key=lambda d: d.name))
        if len(self._cache) >= MATCH_CACHE_MAX:
            # A catalogue may live as long as its tables are unchanged: bound the memo.
            self._cache.clear()
        self._cache[key] = result
        return result
