"""Workflow intake: safe decoding, validation, and placement units (DESIGN sections 4 and 9).

Pure package: no Django, no I/O except reading the shipped schema file once.

``parse_workflow(raw, catalogue=...)`` takes YAML/JSON bytes or text (or an already decoded
dict), checks the document for structure (Argo's JSON schema, trimmed copy in
``placement/schemas``) and for meaning (entrypoint, template references, names, cycles,
``depends`` expressions), and returns a ``ParsedWorkflow`` whose ``units`` are in topological
order. Every problem found is reported at once in ``WorkflowInvalid.errors`` as
``FieldError(path, message)`` with paths like ``spec.templates[2].dag.tasks[0].dependencies``.

The modules, from the bottom up (each imports only those above it):

* ``errors``: ``FieldError``, ``WorkflowInvalid``, ``Limits``, and field paths.
* ``results``: what the parser returns (``Unit``, ``ParsedWorkflow``, ``Arguments``, ...).
* ``decode``: safe YAML and JSON decoding into plain JSON types (``decode_document``).
* ``schema``: structure against Argo's schema (``schema_errors``).
* ``depends``: Argo's ``depends`` grammar, the project's one reader of it.
* ``when``: the bounded ``when`` grammar (``parse_when``, ``when_problem``), RE2 patterns.
* ``resources``: Kubernetes quantities and what a template's pod asks for.
* ``arguments``: arguments and the data references in them.
* ``names``: Kubernetes and Argo name rules, unit slugs.
* ``expansion``: ``withItems`` / ``withSequence`` / ``withParam`` items and ``{{item}}``.
* ``catalogue``: the WorkflowTemplate catalogue references resolve against.
* ``references``: semantic checks (references, DAG dependencies, cycles) and reachability.
* ``pods``: how many pods one unit's step workflow can create (nested loops, recursion).
* ``facts``: what the units of one call share (resources, images, datasets, labels).
* ``loops``: how many units a call's loop gives, and its items when known at submission.
* ``units``: placement units of the entrypoint.
* ``together``: features that keep the entrypoint's units together, and preview warnings.
* ``volumes``: volumes, claims and mounts as kube-apiserver admits them.
* ``workflow``: ``parse_workflow`` and ``parse_workflow_template``.

Callers import from ``placement.parser`` itself; the names below are its interface.
"""

from placement.parser.across_sites import preview_warnings
from placement.parser.arguments import artifact_locations, parse_arguments
from placement.parser.catalogue import uses_catalogue
from placement.parser.decode import JsonDocument, decode_document
from placement.parser.depends import (
    TASK_RESULTS,
    DependsExpr,
    DependsSyntaxError,
    depends_tasks,
    parse_depends,
)
from placement.parser.entry import entry_inputs
from placement.parser.errors import DEFAULT_LIMITS, FieldError, Limits, WorkflowInvalid
from placement.parser.expansion import expand_with_param, parse_with_param_value, substitute_item
from placement.parser.names import (
    ARGO_FIELD_MAX,
    ARGO_FIELD_NAME,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    PARAM_NAME,
    SLUG_MAX,
    item_label,
    slugify,
)
from placement.parser.references import TEMPLATE_TYPES
from placement.parser.resources import parse_quantity, template_images, template_pod_resources
from placement.parser.results import (
    Arguments,
    Artifact,
    CatalogueEntry,
    FieldWarning,
    Parameter,
    ParsedWorkflow,
    Resources,
    Unit,
    UnitKind,
)
from placement.parser.schema import SCHEMA_PATH, schema_errors
from placement.parser.when import (
    MAX_REGEX_CHARS,
    MAX_WHEN_CHARS,
    MAX_WHEN_DEPTH,
    MAX_WHEN_TOKENS,
    WhenExpr,
    WhenSyntaxError,
    compile_regex,
    parse_when,
    when_problem,
)
from placement.parser.workflow import (
    API_VERSION,
    DEFAULT_DOMAIN,
    parse_workflow,
    parse_workflow_template,
)

__all__ = [
    "API_VERSION",
    "ARGO_FIELD_MAX",
    "ARGO_FIELD_NAME",
    "DEFAULT_DOMAIN",
    "DEFAULT_LIMITS",
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "MAX_REGEX_CHARS",
    "MAX_WHEN_CHARS",
    "MAX_WHEN_DEPTH",
    "MAX_WHEN_TOKENS",
    "PARAM_NAME",
    "SCHEMA_PATH",
    "SLUG_MAX",
    "TASK_RESULTS",
    "TEMPLATE_TYPES",
    "Arguments",
    "Artifact",
    "CatalogueEntry",
    "DependsExpr",
    "DependsSyntaxError",
    "FieldError",
    "FieldWarning",
    "JsonDocument",
    "Limits",
    "Parameter",
    "ParsedWorkflow",
    "Resources",
    "Unit",
    "UnitKind",
    "WhenExpr",
    "WhenSyntaxError",
    "WorkflowInvalid",
    "artifact_locations",
    "compile_regex",
    "decode_document",
    "depends_tasks",
    "entry_inputs",
    "expand_with_param",
    "item_label",
    "parse_arguments",
    "parse_depends",
    "parse_quantity",
    "parse_when",
    "parse_with_param_value",
    "parse_workflow",
    "parse_workflow_template",
    "preview_warnings",
    "schema_errors",
    "slugify",
    "substitute_item",
    "template_images",
    "template_pod_resources",
    "uses_catalogue",
    "when_problem",
]
