"""Features whose meaning spans the entrypoint's steps: the units
that use them are kept together as one unit, so one Argo at one site runs them as Argo would.

Argo gives these a scope larger than one step: a daemon lives until its parent template ends
(``workflow/controller/operator.go``, ``killDaemonedChildren``); a step's ``hooks`` and
``onExit`` run on the parent's node with the step's status and outputs
(``workflow/controller/hooks.go``, ``exit_handler.go``); a ``volumeClaimTemplates`` claim is
one PVC for the whole workflow (``operator.go``, ``createPVCs``). Split into step workflows,
each would end with its step workflow, or run in one and not in another, or give each step a
fresh, empty claim. Kept together, the site's Argo runs them itself, onExit and workflow-level
hooks included (they see the run's own status there)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from placement.parser.errors import join_path
from placement.parser.results import FieldWarning, Unit

_CONTAINER_FIELDS = ("container", "script")
_CONTAINER_LISTS = ("initContainers", "sidecars")


def entry_calls(entry: Mapping[str, Any], path: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """(call, field path) of every task or step of the entrypoint template."""
    dag = entry.get("dag")
    if isinstance(dag, Mapping):
        for i, t in enumerate(dag.get("tasks") or []):
            if isinstance(t, Mapping):
                yield t, f"{path}.dag.tasks[{i}]"
        return
    for g, group in enumerate(entry.get("steps") or []):
        for s, step in enumerate(group if isinstance(group, list) else []):
            if isinstance(step, Mapping):
                yield step, f"{path}.steps[{g}][{s}]"


def _mounts(template: Mapping[str, Any]) -> set[str]:
    """Names of the volumes a template's containers mount."""
    containers: list[Any] = [template.get(f) for f in _CONTAINER_FIELDS]
    for f in _CONTAINER_LISTS:
        containers += list(template.get(f) or [])
    cset = template.get("containerSet")
    if isinstance(cset, Mapping):
        containers += list(cset.get("containers") or [])
        containers.append(cset)  # a containerSet's own volumeMounts apply to every container
    return {
        str(m.get("name"))
        for c in containers
        if isinstance(c, Mapping)
        for m in c.get("volumeMounts") or []
        if isinstance(m, Mapping)
    }


def _claims_mounted(
    template: Mapping[str, Any], path: str | None, workflow: Mapping[str, tuple[str, str]]
) -> dict[str, str]:
    """Claim → field path, for every claim a template's containers mount: its own
    ``volumes[].persistentVolumeClaim`` first (a template's volume shadows the workflow's of the
    same name), then the workflow's (``workflow``: volume name → (claim, path))."""
    own: dict[str, tuple[str, str]] = {}
    for i, v in enumerate(template.get("volumes") or []):
        pvc = v.get("persistentVolumeClaim") if isinstance(v, Mapping) else None
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            where = f"{path}.volumes[{i}].persistentVolumeClaim" if path else "volumes"
            own[str(v.get("name"))] = (f"pvc:{pvc['claimName']}", where)
    out: dict[str, str] = {}
    for name in _mounts(template):
        found = own.get(name) or workflow.get(name)
        if found is not None:
            out[found[0]] = found[1]
    return out


def _shared_claims(
    spec: Mapping[str, Any],
    units: Sequence[Unit],
    templates: Mapping[str, Mapping[str, Any]],
    template_paths: Mapping[str, str],
) -> list[FieldWarning]:
    """Claims (``volumeClaimTemplates``, ``volumes[].persistentVolumeClaim`` of the workflow or
    of a template) that more than one step workflow would mount: two units, or one unit that
    expands into items at run time."""
    workflow: dict[str, tuple[str, str]] = {}
    for i, c in enumerate(spec.get("volumeClaimTemplates") or []):
        meta = c.get("metadata") if isinstance(c, Mapping) else None
        if isinstance(meta, Mapping) and meta.get("name"):
            workflow[str(meta["name"])] = (f"vct:{meta['name']}", f"spec.volumeClaimTemplates[{i}]")
    for i, v in enumerate(spec.get("volumes") or []):
        pvc = v.get("persistentVolumeClaim") if isinstance(v, Mapping) else None
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            where = f"spec.volumes[{i}].persistentVolumeClaim"
            workflow[str(v.get("name"))] = (f"pvc:{pvc['claimName']}", where)
    users: dict[str, list[Unit]] = {}
    paths: dict[str, str] = {}
    for u in units:
        mounted: dict[str, str] = {}
        for k in u.templates:
            mounted.update(_claims_mounted(templates.get(k) or {}, template_paths.get(k), workflow))
        for claim, where in mounted.items():
            users.setdefault(claim, []).append(u)
            paths.setdefault(claim, where)
    out = []
    for claim, who in users.items():
        if len(who) > 1 or any(u.runtime_expansion for u in who):
            tasks = ", ".join(sorted({u.task for u in who}))
            out.append(
                FieldWarning(
                    paths[claim],
                    f"claim {claim.partition(':')[2]!r} is mounted by {tasks}: they run as one "
                    "unit at one site, on one claim (split, each step workflow would mount "
                    "its own)",
                )
            )
    return out


def keep_together(
    entry: Mapping[str, Any],
    path: str,
    spec: Mapping[str, Any],
    units: Sequence[Unit],
    templates: Mapping[str, Mapping[str, Any]],
    template_paths: Mapping[str, str],
) -> list[FieldWarning]:
    """Why the entrypoint's units must run as one unit (empty: they may be split). Each
    reason names the field that asks for it."""
    out: list[FieldWarning] = []
    by_task = {u.task: u for u in units}
    prefix = "tasks" if isinstance(entry.get("dag"), Mapping) else "steps"
    for call, cpath in entry_calls(entry, path):
        name = str(call.get("name"))
        if isinstance(call.get("hooks"), Mapping) and call["hooks"]:
            out.append(
                FieldWarning(
                    join_path(cpath, "hooks"),
                    f"lifecycle hooks of {name!r} run with its status and outputs: the "
                    "workflow runs as one unit at one site",
                )
            )
        if call.get("onExit"):
            out.append(
                FieldWarning(
                    join_path(cpath, "onExit"),
                    f"the exit handler of {name!r} runs with its status and outputs: the "
                    "workflow runs as one unit at one site",
                )
            )
        unit = by_task.get(name)
        key = unit.template if unit is not None else None
        if key is not None and (templates.get(key) or {}).get("daemon"):
            where = template_paths.get(key)
            out.append(
                FieldWarning(
                    join_path(where, "daemon") if where else cpath,
                    f"{name!r} is a daemon that lives until the entrypoint ends and its "
                    f"clients reach it by {{{{{prefix}.{name}.ip}}}}: the workflow runs as one "
                    "unit at one site",
                )
            )
    hooks = spec.get("hooks")
    for hook in hooks if isinstance(hooks, Mapping) else {}:
        if hook != "exit":
            out.append(
                FieldWarning(
                    join_path("spec.hooks", str(hook)),
                    "a workflow-level hook on an expression is evaluated by the Argo that runs "
                    "the workflow: the workflow runs as one unit at one site",
                )
            )
    return out + _shared_claims(spec, units, templates, template_paths)


def site_bound_warnings(spec: Mapping[str, Any]) -> list[FieldWarning]:
    """Features that hold only where the site has what they name; the portal cannot see a
    member's ConfigMaps or claims, so it says so instead of guessing."""
    out = []
    args = spec.get("arguments")
    params = args.get("parameters") if isinstance(args, Mapping) else None
    for i, p in enumerate(params or []):
        vf = p.get("valueFrom") if isinstance(p, Mapping) else None
        ref = vf.get("configMapKeyRef") if isinstance(vf, Mapping) else None
        if isinstance(ref, Mapping) and p.get("value") is None:
            out.append(
                FieldWarning(
                    f"spec.arguments.parameters[{i}].valueFrom.configMapKeyRef",
                    f"read from ConfigMap {ref.get('name')!r} (key {ref.get('key')!r}) by the "
                    "Argo of the site that runs each step: every site must hold it; the "
                    "portal's own when/withParam/target cannot read it",
                )
            )
    for i, v in enumerate(spec.get("volumes") or []):
        pvc = v.get("persistentVolumeClaim") if isinstance(v, Mapping) else None
        if isinstance(pvc, Mapping):
            out.append(
                FieldWarning(
                    f"spec.volumes[{i}].persistentVolumeClaim.claimName",
                    f"claim {pvc.get('claimName')!r} must exist at the chosen site; a pod "
                    "whose claim is missing stays Pending",
                )
            )
    return out
