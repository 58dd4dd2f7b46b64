"""What the parser returns: placement units, the parsed workflow, catalogue entries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

UnitKind = Literal["task", "step", "workflow"]


@dataclass(frozen=True)
class FieldWarning:
    """What changes (or must hold at a site) for a field the portal accepts; shown at preview."""

    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@dataclass(frozen=True)
class Parameter:
    """A workflow argument or a task argument parameter, with its raw (unresolved) value."""

    name: str
    value: str | None = None
    default: str | None = None
    enum: tuple[str, ...] = ()
    description: str | None = None
    value_from: Mapping[str, Any] | None = None

    @property
    def from_site(self) -> bool:
        """A workflow argument read from a ConfigMap: each site's Argo reads its own."""
        return (
            self.value is None
            and self.value_from is not None
            and isinstance(self.value_from.get("configMapKeyRef"), Mapping)
        )

    @property
    def submitted(self) -> str:
        """The value the portal substitutes: as given (else the default, else ""); for one read
        from a ConfigMap, the reference itself, left for the site's Argo to fill."""
        if self.from_site:
            return "{{workflow.parameters." + self.name + "}}"
        v = self.value if self.value is not None else self.default
        return v if v is not None else ""


@dataclass(frozen=True)
class Artifact:
    """An argument artifact: ``from_`` is a ``{{...}}`` reference, ``locations`` the URIs of an
    inline location (``s3://bucket/key``, ``gs://...``, ``https://...``), ``raw`` the source."""

    name: str
    from_: str | None
    locations: tuple[str, ...]
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class Arguments:
    parameters: tuple[Parameter, ...] = ()
    artifacts: tuple[Artifact, ...] = ()


@dataclass(frozen=True)
class Resources:
    """What one pod of the unit asks for at most. CPU in millicores, memory in bytes."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    gpus: int = 0


@dataclass(frozen=True)
class Unit:
    """A placement unit (DESIGN section 4): one DAG task, one step, or the whole entrypoint.

    ``template`` and ``templates`` are keys into ``ParsedWorkflow.templates``: a local template
    name, ``"ref:<workflowtemplate>/<template>"`` or ``"cref:<clusterworkflowtemplate>/<template>"``
    for a ``templateRef``, or ``"inline:<task>"`` for an inline template. ``upstream`` names
    units of this workflow; ``depends`` is the Argo expression over *task* names (for
    ``dependencies`` lists it is the equivalent ``A && B``); ``with_param`` is set when the unit
    must be expanded at run time (see ``expand_with_param``).
    """

    name: str
    slug: str
    kind: UnitKind
    task: str
    template: str
    templates: tuple[str, ...]
    upstream: tuple[str, ...]
    depends: str
    when: str | None
    arguments: Arguments
    labels: Mapping[str, str]
    images: tuple[str, ...]
    resources: Resources
    datasets: tuple[str, ...]
    data_refs: tuple[str, ...]
    item: Any = None
    item_index: int | None = None
    with_param: str | None = None
    continue_on_failed: bool = False
    # Bytes of output artifacts the unit's template declares (``<domain>/output-sizes``): None
    # when not declared (Argo records no sizes), 0 when it declares no output artifacts.
    output_bytes: int | None = None
    # The units were kept together (``together``): this one's step workflow also carries the
    # workflow's onExit and hooks, which its site's Argo runs with the run's own status.
    carries_exit: bool = False
    # Pods the unit's step workflow can create (``placement.parser.pods``): 1 for a leaf, the
    # product of nested loop sizes (known or bounded) for a steps or DAG template.
    pods: int = 1

    @property
    def runtime_expansion(self) -> bool:
        return self.with_param is not None


@dataclass(frozen=True)
class ParsedWorkflow:
    """A validated Workflow. ``spec`` is the (merged, for workflowTemplateRef) spec as given."""

    name: str | None
    generate_name: str | None
    namespace: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    arguments: Arguments
    entrypoint: str
    on_exit: str | None
    templates: Mapping[str, Mapping[str, Any]]
    template_scopes: Mapping[str, str]
    units: tuple[Unit, ...]
    spec: Mapping[str, Any]
    document: Mapping[str, Any] = field(repr=False)
    # (path, message) of what the preview must say: a feature whose meaning changes across
    # sites, or a loop the preview cannot expand.
    warnings: tuple[FieldWarning, ...] = ()

    @property
    def display_name(self) -> str:
        return self.name or (self.generate_name or "workflow").rstrip("-")

    def workflow_parameters(self) -> dict[str, str]:
        """Workflow parameter values as submitted (``Parameter.submitted``)."""
        return {p.name: p.submitted for p in self.arguments.parameters}


@dataclass(frozen=True)
class CatalogueEntry:
    """A WorkflowTemplate (or ClusterWorkflowTemplate) as stored in the portal's catalogue."""

    name: str
    kind: str
    document: Mapping[str, Any]
