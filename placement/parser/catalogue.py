"""The WorkflowTemplate catalogue a workflow's references resolve against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placement.parser.results import CatalogueEntry


class TemplateCatalogue:
    def __init__(
        self,
        catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None,
        cluster_catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None,
    ) -> None:
        self.namespaced = {k: _doc_of(v) for k, v in (catalogue or {}).items()}
        self.cluster = {k: _doc_of(v) for k, v in (cluster_catalogue or {}).items()}

    def templates_of(self, name: str, cluster: bool) -> dict[str, Mapping[str, Any]] | None:
        doc = (self.cluster if cluster else self.namespaced).get(name)
        if doc is None:
            return None
        spec = doc.get("spec") if isinstance(doc, Mapping) else None
        out: dict[str, Mapping[str, Any]] = {}
        for t in (spec or {}).get("templates") or [] if isinstance(spec, Mapping) else []:
            if isinstance(t, Mapping) and isinstance(t.get("name"), str):
                out[t["name"]] = t
        return out


def _doc_of(entry: Mapping[str, Any] | CatalogueEntry) -> Mapping[str, Any]:
    return entry.document if isinstance(entry, CatalogueEntry) else entry


_REF_KEYS = frozenset({"templateRef", "workflowTemplateRef"})


def uses_catalogue(doc: Any) -> bool:
    """Whether a document can reach the catalogue at all (a ``templateRef`` or
    ``workflowTemplateRef`` anywhere): callers skip loading the catalogue when it cannot."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if not _REF_KEYS.isdisjoint(node.keys()):
                return True
            stack.extend(v for v in node.values() if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (Mapping, list)))
    return False


def missing_template_message(what: str, name: str, template: str | None = None) -> str:
    """The error for a ``templateRef``/``workflowTemplateRef`` the catalogue cannot answer: what
    is missing and how to add it."""
    if template is None:
        return (
            f"no {what} named {name!r} in the catalogue; add it with "
            f"POST /api/v1/workflow-templates/ (body: the {what} with metadata.name {name!r}), "
            "then submit again"
        )
    return (
        f"{what} {name!r} has no template named {template!r}; add it to spec.templates and "
        f"replace the {what} with PUT /api/v1/workflow-templates/{name}/, then submit again"
    )
