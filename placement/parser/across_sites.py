"""What changes meaning when a workflow's units run at several sites and the portal cannot
hold it for the run: said at preview, with the field, never silently."""

from __future__ import annotations

from placement.parser.results import FieldWarning, ParsedWorkflow


def _template_path(parsed: ParsedWorkflow, key: str) -> str:
    """``spec.templates[i]`` for a template of the document, else the catalogue key."""
    for i, t in enumerate(parsed.spec.get("templates") or []):
        if isinstance(t, dict) and t.get("name") == key:
            return f"spec.templates[{i}]"
    return f"templates[{key}]"


def preview_warnings(parsed: ParsedWorkflow) -> list[FieldWarning]:
    """One warning per field whose meaning is per site rather than per run:

    * ``memoize``: Argo's cache is a ConfigMap in the namespace of the controller that runs
      the step, so each site keeps its own; a step placed at another site than the one that
      memoized it runs again;
    * ``synchronization`` on a template that runs inside a unit (not the entrypoint's child
      the portal starts): that site's Argo holds the lock for its own workflows only. The
      portal holds workflow-level locks and those of the templates units run itself.
    """
    out: list[FieldWarning] = []
    unit_templates = {u.template for u in parsed.units}
    for key, template in parsed.templates.items():
        path = _template_path(parsed, key)
        if template.get("memoize"):
            out.append(
                FieldWarning(
                    f"{path}.memoize",
                    "the memoization cache is per site (a ConfigMap of the site's Argo): a step "
                    "run at another site does not find the result cached there and runs again",
                )
            )
        if template.get("synchronization") and key not in unit_templates:
            out.append(
                FieldWarning(
                    f"{path}.synchronization",
                    "this template runs inside a step workflow: its lock is held by that "
                    "site's Argo for that site only, not across the run's sites and runs",
                )
            )
    return out
