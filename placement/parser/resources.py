"""Kubernetes quantities, and what a template's pod asks for and runs."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from placement.parser.decode import YamlTooLarge, load_yaml
from placement.parser.errors import Limits
from placement.parser.results import Resources

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes quantity as a float in base units; None for templated or invalid values."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m:
        return None
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


def _container_resources(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources")
    if not isinstance(res, Mapping):
        return Resources()
    requests = res.get("requests") if isinstance(res.get("requests"), Mapping) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), Mapping) else {}
    assert isinstance(requests, Mapping) and isinstance(limits, Mapping)

    def pick(key: str) -> float:
        # Kubernetes defaults a missing request to the limit; GPUs are usually only in limits.
        q = parse_quantity(requests.get(key)) if key in requests else None
        if q is None and key in limits:
            q = parse_quantity(limits.get(key))
        return max(q or 0.0, 0.0)

    return Resources(
        cpu_millicores=math.ceil(pick("cpu") * 1000 - 1e-9),
        memory_bytes=math.ceil(pick("memory") - 1e-9),
        gpus=math.ceil(pick("nvidia.com/gpu") - 1e-9),
    )


def _sum(rs: Iterable[Resources]) -> Resources:
    cpu = mem = gpu = 0
    for r in rs:
        cpu += r.cpu_millicores
        mem += r.memory_bytes
        gpu += r.gpus
    return Resources(cpu, mem, gpu)


def max_resources(rs: Iterable[Resources]) -> Resources:
    cpu = mem = gpu = 0
    for r in rs:
        cpu = max(cpu, r.cpu_millicores)
        mem = max(mem, r.memory_bytes)
        gpu = max(gpu, r.gpus)
    return Resources(cpu, mem, gpu)


def _pod_spec_patch_containers(patch: Any) -> dict[str, Mapping[str, Any]]:
    """Containers of a podSpecPatch string (YAML or JSON), by name; {} if templated/invalid."""
    if not isinstance(patch, str) or "{{" in patch or len(patch) > 65536:
        return {}
    try:
        doc = load_yaml(patch, Limits(max_yaml_aliases=0, max_expanded_nodes=10_000, max_depth=20))
    except (yaml.YAMLError, YamlTooLarge, RecursionError, ValueError, TypeError):
        return {}
    if len(doc) != 1 or not isinstance(doc[0], dict):
        return {}
    out: dict[str, Mapping[str, Any]] = {}
    for c in doc[0].get("containers") or []:
        if isinstance(c, dict) and isinstance(c.get("name"), str):
            out[c["name"]] = c
    return out


def template_pod_resources(
    template: Mapping[str, Any], wf_pod_spec_patch: Any = None, wf_pod_resources: Any = None
) -> Resources:
    """Requests of the pod one leaf template runs: its containers summed (main, sidecars,
    containerSet), init containers maxed (they run one at a time before the others), and a
    podSpecPatch's container resources replacing those of the container it names."""
    containers: dict[str, Mapping[str, Any]] = {}
    for key in ("container", "script"):
        c = template.get(key)
        if isinstance(c, Mapping):
            containers["main"] = c
    cs = template.get("containerSet")
    if isinstance(cs, Mapping):
        for i, c in enumerate(cs.get("containers") or []):
            if isinstance(c, Mapping):
                containers[str(c.get("name") or f"#{i}")] = c
    for i, c in enumerate(template.get("sidecars") or []):
        if isinstance(c, Mapping):
            containers[f"sidecar:{c.get('name') or i}"] = c
    for patch in (wf_pod_spec_patch, template.get("podSpecPatch")):
        for name, c in _pod_spec_patch_containers(patch).items():
            if isinstance(c.get("resources"), Mapping):
                containers[name] = c
    main = _sum(_container_resources(c) for c in containers.values())
    init = max_resources(
        _container_resources(c)
        for c in template.get("initContainers") or []
        if isinstance(c, Mapping)
    )
    pod = max_resources((main, init))
    # Pod-level resources (template, else workflow) set the pod's budget as a whole.
    for budget in (template.get("podResources"), wf_pod_resources):
        if isinstance(budget, Mapping):
            level = _container_resources({"resources": budget})
            return Resources(
                level.cpu_millicores or pod.cpu_millicores,
                level.memory_bytes or pod.memory_bytes,
                max(level.gpus, pod.gpus),
            )
    return pod


def template_images(template: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("container", "script"):
        c = template.get(key)
        if isinstance(c, Mapping) and isinstance(c.get("image"), str):
            out.append(c["image"])
    cs = template.get("containerSet")
    if isinstance(cs, Mapping):
        out += [
            c["image"]
            for c in cs.get("containers") or []
            if isinstance(c, Mapping) and isinstance(c.get("image"), str)
        ]
    for key in ("initContainers", "sidecars"):
        out += [
            c["image"]
            for c in template.get(key) or []
            if isinstance(c, Mapping) and isinstance(c.get("image"), str)
        ]
    return out
