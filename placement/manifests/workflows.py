"""The step workflow: the Argo Workflow that runs one placement unit (DESIGN section 3)."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from placement import labels
from placement.labels import DEFAULT_DOMAIN
from placement.manifests.arguments import resolve_arguments
from placement.manifests.images import mirror_images
from placement.manifests.names import API_VERSION, dns_name, label_value
from placement.manifests.outputs import TaskOutputs, with_skipped_defaults
from placement.manifests.workflow_variables import (
    GlobalOutputs,
    fill_global_artifacts,
    fill_run_variables,
)
from placement.parser import ParsedWorkflow, Unit, entry_inputs

# Workflow-level fields a step workflow must not inherit: the portal sets or runs them itself.
_NOT_INHERITED = frozenset(
    {
        "templates",
        "entrypoint",
        "arguments",
        "onExit",
        "hooks",
        "workflowTemplateRef",
        "suspend",
        "shutdown",
        # The portal deletes a step workflow once it has recorded its outcome; a member that
        # deletes one first (its ttlStrategy) gets it re-created by Karmada and the step runs
        # again. The run's own retention applies to the run, not to its step workflows.
        "ttlStrategy",
        "podGC",
    }
)

# podGC strategies that keep the pods of a failed step (their logs are what an operator reads
# through Karmada's cluster proxy); the others are narrowed to these.
_POD_GC_KEEPING_FAILURES = {
    "OnPodCompletion": "OnPodSuccess",
    "OnWorkflowCompletion": "OnWorkflowSuccess",
    "OnPodSuccess": "OnPodSuccess",
    "OnWorkflowSuccess": "OnWorkflowSuccess",
}


def _pod_gc(user: Any) -> dict[str, Any] | None:
    """The user's podGC, narrowed so a failed step's pods (and logs) stay; pods are not
    propagated objects, so deleting them cannot make Karmada run a step again."""
    if not isinstance(user, dict):
        return None
    strategy = _POD_GC_KEEPING_FAILURES.get(str(user.get("strategy") or ""))
    if strategy is None:
        return None
    out = {k: copy.deepcopy(v) for k, v in user.items() if k in ("labelSelector",)}
    out["strategy"] = strategy
    return out


def step_workflow_name(run_name: str, unit_slug: str, attempt: int) -> str:
    """``<run-name>-<unit-slug>-<attempt>``, DNS-1123, at most 63 characters."""
    return dns_name(run_name, unit_slug, str(attempt))


def emitted_template_names(parsed: ParsedWorkflow, keys: Sequence[str]) -> dict[str, str]:
    """Template key → name in the step workflow. Local templates keep their names; catalogue
    templates become ``<workflowtemplate>-<template>`` (deduplicated), inline ones
    ``<task>-inline``."""
    taken = {k for k in keys if not k.startswith(("ref:", "cref:", "inline:"))}
    names: dict[str, str] = {k: k for k in taken}
    for k in keys:
        if k in names:
            continue
        if k.startswith(("ref:", "cref:")):
            wft, _, tmpl = k.partition(":")[2].partition("/")
            base = f"{wft}-{tmpl}"
        else:
            base = "inline-" + hashlib.sha256(k.encode()).hexdigest()[:8]
        base = re.sub(r"[^A-Za-z0-9-]+", "-", base).strip("-")[:120] or "t"
        name, n = base, 1
        while name in names.values():
            n += 1
            name = f"{base}-{n}"
        names[k] = name
    return names


def _rewrite_calls(
    template: Any, scope: str, parsed: ParsedWorkflow, names: Mapping[str, str]
) -> Any:
    """Copy of a template whose steps / tasks / hooks call the emitted names (no templateRef)."""
    t = copy.deepcopy(template)

    def key_for(call: Mapping[str, Any]) -> str | None:
        if call.get("template"):
            name = str(call["template"])
            return name if not scope else f"{scope}/{name}"
        ref = call.get("templateRef")
        if isinstance(ref, Mapping):
            kind = "cref" if ref.get("clusterScope") else "ref"
            return f"{kind}:{ref.get('name')}/{ref.get('template')}"
        return None

    def fix(call: Any) -> None:
        if not isinstance(call, dict):
            return
        k = key_for(call)
        if k is not None and k in names:
            call.pop("templateRef", None)
            call["template"] = names[k]
        on_exit = call.get("onExit")
        if isinstance(on_exit, str) and on_exit:
            k2 = on_exit if not scope else f"{scope}/{on_exit}"
            if k2 in names:
                call["onExit"] = names[k2]
        hooks = call.get("hooks")
        if isinstance(hooks, dict):
            for hook in hooks.values():
                fix(hook)
        inline = call.get("inline")
        if isinstance(inline, dict):
            call["inline"] = _rewrite_calls(inline, scope, parsed, names)

    for group in t.get("steps") or []:
        for step in group if isinstance(group, list) else []:
            fix(step)
    dag = t.get("dag")
    if isinstance(dag, dict):
        for task in dag.get("tasks") or []:
            fix(task)
    hooks = t.get("hooks")
    if isinstance(hooks, dict):
        for hook in hooks.values():
            fix(hook)
    return t


def step_workflow(
    parsed: ParsedWorkflow,
    unit: Unit,
    *,
    run_name: str,
    run_id: str | int,
    attempt: int = 1,
    namespace: str,
    site: str | None,
    reason: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    domain: str = DEFAULT_DOMAIN,
    image_mirror: str | None = None,
    run_vars: Mapping[str, str] | None = None,
    globals_: GlobalOutputs | None = None,
) -> dict[str, Any]:
    """The Argo Workflow that runs ``unit`` (DESIGN section 3).

    ``site`` None means runtime placement (label ``P/placement=runtime``). ``workflow_parameters``
    are the run's resolved parameters (default: as submitted); ``outputs`` are the upstream
    units' outputs by task/step name. The unit's template is the entrypoint; a task's arguments
    become the workflow's arguments (Argo feeds them to the entrypoint's inputs by name), beside
    the run's workflow parameters that templates may read as ``{{workflow.parameters.x}}``; on a
    name clash the task's value wins. Raises ``Unresolved`` when an upstream output is missing,
    ``ValueError`` for a ``withParam`` unit not yet expanded. ``run_vars`` (from
    ``run_variables``) fill ``{{workflow.name}}``, ``uid``, ``labels.x`` ... with the run's values;
    ``globals_`` the run's global outputs so far (``{{workflow.outputs.*}}``).
    """
    if unit.runtime_expansion:
        raise ValueError(
            f"unit {unit.name!r} expands at run time (withParam): expand it first "
            "with placement.parser.expand_with_param"
        )
    wp = dict(parsed.workflow_parameters())
    if workflow_parameters:
        wp.update(workflow_parameters)
    spec = _step_spec(parsed, unit, wp, outputs)
    spec = _fill_run_level(spec, unit, run_vars, globals_)
    wf: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": step_metadata(
            unit,
            domain,
            run_name=run_name,
            namespace=namespace,
            run_id=run_id,
            attempt=attempt,
            site=site,
            reason=reason,
        ),
        "spec": spec,
    }
    if image_mirror:
        wf = mirror_images(wf, image_mirror)
    return wf


def _step_spec(
    parsed: ParsedWorkflow,
    unit: Unit,
    workflow_parameters: Mapping[str, str],
    outputs: Mapping[str, TaskOutputs] | None,
) -> dict[str, Any]:
    """The step workflow's spec: the run's spec less what the portal sets or runs itself, the
    unit's templates under their emitted names (its own the entrypoint), and its arguments."""
    names = emitted_template_names(parsed, unit.templates)
    templates = []
    for k in unit.templates:
        t = _rewrite_calls(parsed.templates[k], parsed.template_scopes.get(k, ""), parsed, names)
        t["name"] = names[k]
        templates.append(t)
    spec: dict[str, Any] = {
        k: copy.deepcopy(v) for k, v in parsed.spec.items() if k not in _NOT_INHERITED
    }
    spec["entrypoint"] = names[unit.template]
    spec["templates"] = templates
    pod_gc = _pod_gc(parsed.spec.get("podGC"))
    if pod_gc:
        spec["podGC"] = pod_gc
    if unit.carries_exit:
        spec.update(_carried_exit(parsed, names))
    if outputs:
        outputs = with_skipped_defaults(outputs, parsed.templates)
    arguments = _step_arguments(parsed, unit, workflow_parameters, outputs)
    if arguments:
        spec["arguments"] = arguments
    return spec


def _fill_run_level(
    spec: dict[str, Any],
    unit: Unit,
    run_vars: Mapping[str, str] | None,
    globals_: GlobalOutputs | None,
) -> dict[str, Any]:
    """``{{workflow.name}}`` and friends mean the run, not this step workflow;
    global outputs set by earlier units (maybe at other sites) are filled in too."""
    variables = dict(run_vars or {})
    if unit.carries_exit:
        # The whole run is this step workflow: its own Argo knows these at exit time, the
        # portal knows them only when it builds it.
        variables.pop("workflow.duration", None)
        variables.pop("workflow.failures", None)
    if globals_ is not None:
        # This step workflow's Argo never saw them.
        variables.update(globals_.variables())
        spec = fill_global_artifacts(spec, globals_.artifacts)
    if variables:
        spec = fill_run_variables(spec, variables)
    return spec


def _carried_exit(parsed: ParsedWorkflow, names: Mapping[str, str]) -> dict[str, Any]:
    """``onExit`` and ``hooks`` for the one step workflow of a run whose units were kept
    together, calling the templates by their emitted names."""
    out: dict[str, Any] = {}
    on_exit = parsed.spec.get("onExit")
    if isinstance(on_exit, str) and on_exit:
        out["onExit"] = names.get(on_exit, on_exit)
    hooks = parsed.spec.get("hooks")
    if isinstance(hooks, Mapping) and hooks:
        out["hooks"] = _rewrite_calls({"hooks": dict(hooks)}, "", parsed, names)["hooks"]
    return out


def _step_arguments(
    parsed: ParsedWorkflow,
    unit: Unit,
    workflow_parameters: Mapping[str, str],
    outputs: Mapping[str, TaskOutputs] | None,
) -> dict[str, Any]:
    """The step workflow's ``arguments``: the run's workflow parameters, then the task's own
    (resolved) arguments, which win a name clash. A whole-workflow unit has no task arguments;
    it keeps the submitted workflow's artifacts."""
    if unit.kind == "workflow" and not unit.arguments.parameters and not unit.arguments.artifacts:
        # A whole-workflow unit feeds the workflow's own arguments to the entrypoint; only the
        # exit handler of a workflow-level exit hook has arguments of its own.
        args: dict[str, Any] = {}
    else:
        args = resolve_arguments(
            unit.arguments,
            workflow_parameters,
            outputs,
            item=unit.item,
            has_item=unit.item_index is not None,
            current=unit.task,
            input_defaults=_input_defaults(parsed.templates.get(unit.template)),
            # The entrypoint's inputs, for expressions (the parser filled the plain tags).
            inputs=entry_inputs(parsed.templates.get(parsed.entrypoint) or {}, workflow_parameters),
        )
    params = {p["name"]: p for p in args.get("parameters", [])}
    from_site = {p.name: p for p in parsed.arguments.parameters if p.from_site}
    merged = [
        # A ConfigMap argument goes as a reference, read by the site's Argo.
        {"name": n, "valueFrom": copy.deepcopy(dict(from_site[n].value_from or {}))}
        if n in from_site and v == from_site[n].submitted
        else {"name": n, "value": v}
        for n, v in workflow_parameters.items()
        if n not in params
    ]
    merged += list(params.values())
    arguments: dict[str, Any] = {}
    if merged:
        arguments["parameters"] = merged
    if args.get("artifacts"):
        arguments["artifacts"] = args["artifacts"]
    elif unit.kind == "workflow":
        wf_args = parsed.spec.get("arguments")
        if isinstance(wf_args, Mapping) and wf_args.get("artifacts"):
            arguments["artifacts"] = copy.deepcopy(list(wf_args["artifacts"]))
    return arguments


def _input_defaults(template: Any) -> dict[str, str]:
    """``inputs.parameters[].default`` of the unit's template, by name."""
    inputs = template.get("inputs") if isinstance(template, Mapping) else None
    params = inputs.get("parameters") if isinstance(inputs, Mapping) else None
    return {
        str(p["name"]): str(p["default"])
        for p in params or []
        if isinstance(p, Mapping) and p.get("name") and p.get("default") is not None
    }


def _step_labels(
    unit: Unit, domain: str, *, run_id: str | int, attempt: int, site: str | None
) -> dict[str, str]:
    """The contract's labels: who the step workflow belongs to, and where it goes (a site, or
    ``placement=runtime`` for the webhook)."""
    out = {
        labels.key(domain, labels.MANAGED): "true",
        labels.key(domain, labels.RUN): label_value(str(run_id)),
        labels.key(domain, labels.UNIT): label_value(unit.slug),
        labels.key(domain, labels.ATTEMPT): str(attempt),
    }
    if site:
        out[labels.key(domain, labels.SITE)] = label_value(site)
    else:
        out[labels.key(domain, labels.PLACEMENT)] = labels.RUNTIME
    if unit.resources.gpus:
        out[labels.key(domain, labels.GPU)] = "true"
    return out


def step_metadata(
    unit: Unit,
    domain: str,
    *,
    run_name: str,
    namespace: str,
    run_id: str | int,
    attempt: int,
    site: str | None,
    reason: str,
) -> dict[str, Any]:
    """A step workflow's metadata (a transfer's as a task's): its name, the contract's labels,
    and why it goes where it goes."""
    return {
        "name": step_workflow_name(run_name, unit.slug, attempt),
        "namespace": namespace,
        "labels": _step_labels(unit, domain, run_id=run_id, attempt=attempt, site=site),
        "annotations": {
            labels.key(domain, labels.REASON): " ".join(reason.split())[:1024],
            labels.key(domain, labels.UNIT_NAME): unit.name,
        },
    }
