"""Reading a submission: the parser's bounds from the settings, arguments and enums applied,
the project it runs in, its priority within that project's range."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings

from placement import parser
from placement.parser import FieldError, FieldWarning, ParsedWorkflow, WorkflowInvalid
from portal import catalogue
from portal.selectors import projects_of
from sites.models import DEFAULT_PRIORITY_RANGE, Project, priority_clamp


def parser_limits() -> parser.Limits:
    """The parser's bounds from the settings, for the API and the submit page (the webhook
    builds the same from the settings itself: it must not import this module)."""
    return parser.Limits(
        max_body_bytes=settings.PORTAL_MAX_BODY_BYTES,
        max_units=settings.PORTAL_MAX_UNITS,
        max_dependency_edges=settings.PORTAL_MAX_DEPENDENCY_EDGES,
        max_pods_per_unit=settings.PORTAL_MAX_PODS_PER_UNIT,
        unknown_loop_items=settings.PORTAL_UNKNOWN_LOOP_ITEMS,
    )


def _apply_arguments(doc: dict[str, Any], arguments: dict[str, str] | None) -> dict[str, Any]:
    """Set workflow parameter values from a form or an API client before parsing."""
    if not arguments:
        return doc
    if not isinstance(arguments, dict):
        raise WorkflowInvalid([FieldError("arguments", "must be an object of name: value")])
    spec = doc.get("spec")
    params = (spec.get("arguments") or {}).get("parameters") if isinstance(spec, dict) else None
    if not isinstance(params, list):
        params = []
    known = {p.get("name"): p for p in params if isinstance(p, dict)}
    errors = [
        FieldError(f"arguments.{name}", "no such workflow parameter")
        for name in arguments
        if name not in known
    ]
    errors += [
        FieldError(f"arguments.{name}", "must be a string")
        for name, value in arguments.items()
        if not isinstance(value, (str, int, float, bool))
    ]
    if errors:
        raise WorkflowInvalid(errors)
    for name, value in arguments.items():
        known[name]["value"] = str(value)
    return doc


def _check_enums(doc: dict[str, Any], arguments: dict[str, str] | None) -> None:
    """A workflow parameter with an ``enum`` takes only one of its values (Argo refuses the
    workflow otherwise): a value given in ``arguments`` is reported at ``arguments.<name>``,
    one written in the manifest at its place in ``spec.arguments.parameters``."""
    spec = doc.get("spec")
    params = (spec.get("arguments") or {}).get("parameters") if isinstance(spec, dict) else None
    errors = []
    for i, p in enumerate(params if isinstance(params, list) else []):
        if not isinstance(p, dict) or not isinstance(p.get("enum"), list) or not p["enum"]:
            continue
        value = p.get("value", p.get("default"))
        if value is None:
            continue
        allowed = [str(e).lower() if isinstance(e, bool) else str(e) for e in p["enum"]]
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        if shown not in allowed:
            name = p.get("name")
            path = (
                f"arguments.{name}"
                if arguments and name in arguments
                else f"spec.arguments.parameters[{i}].value"
            )
            errors.append(FieldError(path, f"{shown!r} is not one of {', '.join(allowed)}"))
    if errors:
        raise WorkflowInvalid(errors)


def workflow_parse(
    *,
    body: str | bytes | dict[str, Any],
    arguments: dict[str, str] | None = None,
    project: Project | None = None,
) -> ParsedWorkflow:
    """Decode, validate and split a submitted Workflow into units (raises WorkflowInvalid).
    ``templateRef``s resolve in ``project``'s catalogue, then the fleet-wide one."""
    doc = parser.decode_document(body, parser_limits())
    doc = _apply_arguments(doc, arguments)
    _check_enums(doc, arguments)
    uses = parser.uses_catalogue(doc)
    parsed = parser.parse_workflow(
        doc,
        catalogue.catalogue_for(project) if uses else {},
        cluster_catalogue=catalogue.catalogue_for(None, catalogue.CLUSTER_KIND) if uses else {},
        limits=parser_limits(),
        domain=settings.PORTAL_LABEL_DOMAIN,
    )
    return _priority_clamped(parsed, project)


def _priority_clamped(parsed: ParsedWorkflow, project: Project | None) -> ParsedWorkflow:
    """``spec.priority`` within the range the project allows: the run is compiled with the
    clamped value (its place in a lock's queue, its step workflows' priority at their site),
    and the preview and the run's history say so at ``spec.priority``."""
    asked = parsed.spec.get("priority")
    if isinstance(asked, bool) or not isinstance(asked, int):
        return parsed  # Argo's schema types it; a string priority is refused there
    allowed = priority_clamp(asked, project)
    if allowed == asked:
        return parsed
    low, high = project.priority_range if project is not None else DEFAULT_PRIORITY_RANGE
    whose = f"project {project.name!r}" if project is not None else "a run in no project"
    warning = FieldWarning(
        "spec.priority",
        f"{asked} is outside the range {whose} allows ({low} to {high}): "
        f"the run's priority is {allowed}",
    )
    return dataclasses.replace(
        parsed,
        spec={**parsed.spec, "priority": allowed},
        warnings=(*parsed.warnings, warning),
    )


def project_for(user: Any, project: Project | str | None) -> Project | None:
    if project is None or project == "":
        return default_project(user)
    # One query: the project by name among the user's own (unknown and not-yours look alike).
    key: dict[str, Any] = {"pk": project.pk} if isinstance(project, Project) else {"name": project}
    obj = projects_of(user).filter(**key).first()
    if obj is None:
        raise WorkflowInvalid([FieldError("project", f"unknown project: {project}")])
    return obj


def default_project(user: Any) -> Project | None:
    """The user's only project, when they have exactly one (staff, who see every project,
    choose). A run in no project is visible to its owner alone."""
    if getattr(user, "is_staff", False) or not getattr(user, "is_authenticated", False):
        return None
    mine = list(projects_of(user)[:2])
    return mine[0] if len(mine) == 1 else None
