"""The hard filters: why a site cannot take a unit (not ready, cordoned, excluded, a hard
rule, a dataset's residency, hardware it lacks, and with ``strict_capacity`` what is busy)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from placement.parser import Resources
from placement.planner.inputs import DatasetInfo, Rule, SiteState
from placement.units import human_bytes


def ineligible(
    s: SiteState,
    req: Resources,
    exclude: frozenset[str],
    hard_out: Sequence[dict[str, str]],
    residency: Sequence[tuple[DatasetInfo, frozenset[str]]],
    strict_capacity: bool,
) -> str | None:
    if not s.ready:
        return "not ready"
    if s.cordoned:
        return "cordoned"
    if s.taint:
        return f"Karmada will not schedule here (untolerated taint {s.taint})"
    if s.name in exclude:
        return "excluded by caller"
    for out in hard_out:
        why = out.get(s.name)
        if why is not None:
            return why
    for d, regions in residency:
        if s.region not in regions:
            allowed = ", ".join(sorted(regions))
            return f"dataset {d.name} must stay in {allowed} (site region {s.region or 'unknown'})"
    # What the site could never run is out; what is busy now only scores (below, unless
    # strict): a unit decided at submission runs later, and a full member queues its pods,
    # GPU pods included (filtering on free GPUs refused submissions Argo would have queued).
    if req.gpus and req.gpus > s.gpu_allocatable:
        return f"needs {req.gpus} GPU, site has {s.gpu_allocatable} in all"
    if req.cpu_millicores > s.cpu_allocatable and s.cpu_allocatable > 0:
        return (
            f"needs {req.cpu_millicores / 1000:g} CPU, site has {s.cpu_allocatable / 1000:g} in all"
        )
    if req.memory_bytes > s.memory_allocatable and s.memory_allocatable > 0:
        total = human_bytes(s.memory_allocatable)
        return f"needs {human_bytes(req.memory_bytes)} memory, site has {total} in all"
    if strict_capacity:
        if req.gpus and req.gpus > s.gpu_free:
            return f"busy: needs {req.gpus} GPU, {s.gpu_free} free of {s.gpu_allocatable}"
        if req.cpu_millicores > s.cpu_free:
            return f"busy: needs {req.cpu_millicores / 1000:g} CPU, {s.cpu_free / 1000:g} free"
        if req.memory_bytes > s.memory_free:
            free = human_bytes(s.memory_free)
            return f"busy: needs {human_bytes(req.memory_bytes)} memory, {free} free"
        if s.pods_allocatable and s.pods_allocated >= s.pods_allocatable:
            return "busy: no pod slots free"
    return None


def exclusions(rule: Rule, sites: Sequence[SiteState]) -> dict[str, str]:
    out: dict[str, str] = {}
    p = rule.params
    label = f"rule '{rule.name}'"
    if rule.effect == "pin":
        allowed = set(str_list(p.get("sites")))
        why = f"{label}: pinned to {', '.join(sorted(allowed)) or 'no site'}"
        if len(why) > 200:
            why = f"{label}: pinned to {len(allowed)} other sites"
        for s in sites:
            if s.name not in allowed:
                out[s.name] = why
    elif rule.effect == "exclude":
        banned = set(str_list(p.get("sites")))
        why = f"{label}: site excluded"
        for s in sites:
            if s.name in banned:
                out[s.name] = why
    elif rule.effect == "require_labels":
        raw = p.get("labels")
        wanted = sorted((str(k), v) for k, v in raw.items()) if isinstance(raw, Mapping) else []
        for s in sites:
            missing = [
                k if v in (None, "*") else f"{k}={v}"
                for k, v in wanted
                if k not in s.labels or (v not in (None, "*") and s.labels[k] != str(v))
            ]
            if missing:
                out[s.name] = f"{label}: site lacks label {', '.join(missing)}"
    elif rule.effect == "require_capabilities":
        caps = str_list(p.get("capabilities"))
        for s in sites:
            missing = [c for c in caps if c not in s.capabilities]
            if missing:
                out[s.name] = f"{label}: site lacks capability {', '.join(missing)}"
    return out


def str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple | set | frozenset):
        return [str(v) for v in value]
    return []


class Eligibility:
    """Per site (by name): why it is ineligible or None; the eligible positions; and, for an
    unplaceable unit, the reasons grouped."""

    __slots__ = ("_summary", "idx", "whys")

    def __init__(self, whys: list[str | None]) -> None:
        self.whys = whys
        self.idx = [i for i, why in enumerate(whys) if why is None]
        self._summary: str | None = None

    def summary(self, sites: Sequence[SiteState]) -> str:
        if self._summary is None:
            groups: dict[str, list[str]] = {}
            for s, why in zip(sites, self.whys, strict=True):
                groups.setdefault(why or "eligible", []).append(s.name)
            parts = []
            ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            for why, names in ordered[:4]:
                more = f" and {len(names) - 3} more" if len(names) > 3 else ""
                parts.append(f"{', '.join(names[:3])}{more}: {why}")
            if len(groups) > 4:
                parts.append(f"{len(groups) - 4} other reasons")
            self._summary = "; ".join(parts) if parts else "no sites"
        return self._summary
