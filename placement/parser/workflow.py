"""The parser proper: a Workflow document in, a ``ParsedWorkflow`` with its units out."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from placement import labels
from placement.parser.across_sites import preview_warnings
from placement.parser.arguments import parse_arguments
from placement.parser.catalogue import TemplateCatalogue, missing_template_message
from placement.parser.decode import decode_document
from placement.parser.errors import DEFAULT_LIMITS, FieldError, Limits, WorkflowInvalid, join_path
from placement.parser.loops import RUNTIME_LOOP
from placement.parser.names import DNS1123_LABEL, DNS1123_SUBDOMAIN, dedupe_slugs
from placement.parser.references import TemplateIndex, check_template
from placement.parser.results import CatalogueEntry, FieldWarning, ParsedWorkflow, Unit
from placement.parser.schema import schema_errors
from placement.parser.together import keep_together, site_bound_warnings
from placement.parser.units import UnitBuilder, topological_order
from placement.parser.volumes import volume_errors

# The label domain of DESIGN section 3 when the settings name none.
DEFAULT_DOMAIN = labels.DEFAULT_DOMAIN
API_VERSION = "argoproj.io/v1alpha1"


def parse_workflow_template(
    raw: bytes | str | Mapping[str, Any], limits: Limits = DEFAULT_LIMITS
) -> CatalogueEntry:
    """Validate a WorkflowTemplate or ClusterWorkflowTemplate for the catalogue."""
    doc = decode_document(raw, limits)
    kind = doc.get("kind")
    errors: list[FieldError] = []
    if kind not in ("WorkflowTemplate", "ClusterWorkflowTemplate"):
        raise WorkflowInvalid(
            [
                FieldError(
                    "kind",
                    "expected WorkflowTemplate or ClusterWorkflowTemplate, "
                    f"found {json.dumps(kind)}",
                )
            ]
        )
    check = dict(doc)
    check["kind"] = "WorkflowTemplate"  # same schema; the trimmed file carries only one of them
    errors += schema_errors(check, "WorkflowTemplate", limits.max_errors)
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(FieldError("metadata.name", "a WorkflowTemplate needs a DNS-1123 name"))
    if not errors:
        spec = doc["spec"]
        seen: set[str] = set()
        for i, t in enumerate(spec.get("templates") or []):
            errors += check_template(t, f"spec.templates[{i}]", seen)
        errors += volume_errors(spec)
    if errors:
        raise WorkflowInvalid(errors[: limits.max_errors])
    assert isinstance(name, str)
    return CatalogueEntry(name=name, kind=str(kind), document=doc)


def parse_workflow(
    raw: bytes | str | Mapping[str, Any],
    catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None = None,
    *,
    cluster_catalogue: Mapping[str, Mapping[str, Any] | CatalogueEntry] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    domain: str = DEFAULT_DOMAIN,
) -> ParsedWorkflow:
    """Decode, validate and split a Workflow into placement units.

    ``catalogue`` maps WorkflowTemplate names to their documents (as stored by the portal);
    ``cluster_catalogue`` does the same for ClusterWorkflowTemplates. Raises ``WorkflowInvalid``
    with every problem found; never anything else for bad input.
    """
    doc = decode_document(raw, limits)
    try:
        return _Parser(doc, TemplateCatalogue(catalogue, cluster_catalogue), limits, domain).run()
    except RecursionError:
        raise WorkflowInvalid([FieldError("", "document nested too deeply")]) from None


class _Parser(TemplateIndex):
    """One Workflow document through structure, names, references, and into units."""

    def __init__(
        self, doc: dict[str, Any], catalogue: TemplateCatalogue, limits: Limits, domain: str
    ) -> None:
        super().__init__(catalogue, limits)
        self.doc = doc
        self.domain = domain

    def run(self) -> ParsedWorkflow:
        doc = self.doc
        self._check_kind(doc.get("kind"))
        self.errors += schema_errors(doc, "Workflow", self.limits.max_errors)
        self.fail_if_errors()
        self.errors += volume_errors(doc["spec"])

        meta: Mapping[str, Any] = doc["metadata"]
        name, generate_name, namespace = self._check_names(meta)
        labels, annotations = self._metadata_maps(meta)
        spec = self._merge_workflow_template_ref(dict(doc["spec"]))
        self._add_local_templates(spec)
        arguments = parse_arguments(spec.get("arguments"))
        self._check_parameter_names(spec.get("arguments"), "spec.arguments")
        entrypoint, on_exit = self._check_entrypoint(spec)

        # Resolve every reference in every local template, pulling in catalogue templates.
        for key in list(self.templates):
            self._walk_template(key, self.template_paths[key])
        self.fail_if_errors()

        assert isinstance(entrypoint, str)
        wf_params = {p.name: p.submitted for p in arguments.parameters}
        units, warnings = self._units(entrypoint, spec, labels, annotations, wf_params)
        self.fail_if_errors()
        if any(u.carries_exit for u in units):
            on_exit = None  # the one unit's step workflow carries it: its Argo runs it
        elif not on_exit:
            on_exit = self._exit_hook(spec)
        parsed = ParsedWorkflow(
            name=name,
            generate_name=generate_name,
            namespace=namespace,
            labels=labels,
            annotations=annotations,
            arguments=arguments,
            entrypoint=entrypoint,
            on_exit=on_exit or None,
            templates=self.templates,
            template_scopes=self.scopes,
            units=units,
            spec=spec,
            document=doc,
            warnings=tuple(
                dict.fromkeys([*self._loop_warnings(units), *warnings, *site_bound_warnings(spec)])
            ),
        )
        # Per-site meaning (memoize, locks inside a unit) is read from the units formed.
        return replace(parsed, warnings=(*parsed.warnings, *preview_warnings(parsed)))

    def _loop_warnings(self, units: tuple[Unit, ...]) -> list[FieldWarning]:
        """The checks' warnings, less "expanded at run time" when the entrypoint was kept as
        one unit: its site's Argo expands those loops itself, as in one cluster."""
        if any(u.carries_exit for u in units):
            return [w for w in self.warnings if w.message != RUNTIME_LOOP]
        return list(self.warnings)

    def _exit_reach(self, entrypoint: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
        """Every template the entrypoint, onExit and the workflow's hooks can call."""
        keys = list(self.reachable(entrypoint))
        on_exit = spec.get("onExit")
        if isinstance(on_exit, str) and on_exit in self.templates:
            keys += self.reachable(on_exit)
        hooks = spec.get("hooks")
        for name, hook in hooks.items() if isinstance(hooks, Mapping) else ():
            key = self.resolve_call(hook, "", join_path("spec.hooks", str(name)), optional=False)
            if key is not None:
                keys += self.reachable(key)
        return tuple(dict.fromkeys(keys))

    def _exit_hook(self, spec: Mapping[str, Any]) -> str | None:
        """``spec.hooks.exit`` is the workflow's exit handler when ``onExit`` is not set
        (``WorkflowSpec.GetExitHook`` in Argo's `pkg/apis/workflow/v1alpha1/workflow_types.go`;
        its own arguments, else the workflow's: the portal's exit unit reads them from the
        spec)."""
        hooks = spec.get("hooks")
        hook = hooks.get("exit") if isinstance(hooks, Mapping) else None
        if not isinstance(hook, Mapping):
            return None
        return self.resolve_call(hook, "", "spec.hooks.exit", optional=False)

    def _check_kind(self, kind: Any) -> None:
        if kind != "Workflow":
            hint = (
                " (store WorkflowTemplates in the catalogue instead)"
                if kind in ("WorkflowTemplate", "ClusterWorkflowTemplate")
                else ""
            )
            self.err("kind", f"expected Workflow, found {json.dumps(kind)}{hint}")
            self.fail_if_errors()

    def _check_names(self, meta: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        """(name, generateName, namespace) as given, each checked."""
        name = meta.get("name")
        generate_name = meta.get("generateName")
        if not name and not generate_name:
            self.err("metadata", "needs a name or a generateName")
        if name and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
            self.err(
                "metadata.name",
                f"{name!r} is not a valid name (lower-case letters, digits, '-' and '.')",
            )
        if generate_name and (
            len(generate_name) > 248
            or not DNS1123_SUBDOMAIN.match(generate_name.rstrip("-") or "-")
        ):
            self.err("metadata.generateName", f"{generate_name!r} is not a valid name prefix")
        namespace = meta.get("namespace")
        if namespace is not None and not DNS1123_LABEL.match(namespace):
            self.err("metadata.namespace", f"{namespace!r} is not a valid namespace")
        return name, generate_name, namespace

    def _metadata_maps(self, meta: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """(labels, annotations) with string values; a label that is not a string is an error."""
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if isinstance(v, str)}
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if isinstance(v, str)
        }
        for k, v in (meta.get("labels") or {}).items():
            if not isinstance(v, str):
                self.err(join_path("metadata.labels", k), "label values must be strings")
        return labels, annotations

    def _add_local_templates(self, spec: Mapping[str, Any]) -> None:
        local_seen: set[str] = set()
        for i, t in enumerate(spec.get("templates") or []):
            path = f"spec.templates[{i}]"
            problems = check_template(t, path, local_seen)
            self.errors += problems
            if (
                isinstance(t, Mapping)
                and isinstance(t.get("name"), str)
                and t["name"] not in self.templates
            ):
                self.templates[t["name"]] = t
                self.scopes[t["name"]] = ""
                self.template_paths[t["name"]] = path

    def _check_entrypoint(self, spec: Mapping[str, Any]) -> tuple[Any, Any]:
        """(entrypoint, onExit) as given, each checked, and the workflow's hooks resolved."""
        entrypoint = spec.get("entrypoint")
        ref_failed = bool(spec.get("workflowTemplateRef"))  # error already reported
        if not entrypoint and ref_failed:
            pass
        elif not entrypoint:
            self.err("spec.entrypoint", "required: the template to start from")
        elif entrypoint not in self.templates:
            self.err("spec.entrypoint", f"no template named {entrypoint!r}")
        on_exit = spec.get("onExit")
        if on_exit and on_exit not in self.templates:
            self.err("spec.onExit", f"no template named {on_exit!r}")
        for hook_name, hook in (spec.get("hooks") or {}).items():
            self.resolve_call(hook, "", join_path("spec.hooks", hook_name), optional=False)
        return entrypoint, on_exit

    def _merge_workflow_template_ref(self, spec: dict[str, Any]) -> dict[str, Any]:
        ref = spec.get("workflowTemplateRef")
        if not isinstance(ref, Mapping):
            return spec
        name = ref.get("name")
        cluster = bool(ref.get("clusterScope"))
        source = self.catalogue.cluster if cluster else self.catalogue.namespaced
        wft = source.get(name) if isinstance(name, str) else None
        if wft is None:
            what = "ClusterWorkflowTemplate" if cluster else "WorkflowTemplate"
            self.err("spec.workflowTemplateRef.name", missing_template_message(what, str(name)))
            return spec
        base = wft.get("spec") if isinstance(wft.get("spec"), Mapping) else {}
        assert isinstance(base, Mapping)
        # Argo merges the workflow over the referenced template's spec; arguments by name.
        merged: dict[str, Any] = {
            **copy.deepcopy(dict(base)),
            **{k: v for k, v in spec.items() if k != "workflowTemplateRef"},
        }
        base_args = base.get("arguments") if isinstance(base.get("arguments"), Mapping) else {}
        own_args = spec.get("arguments") if isinstance(spec.get("arguments"), Mapping) else {}
        assert isinstance(base_args, Mapping) and isinstance(own_args, Mapping)
        args: dict[str, Any] = {}
        for kind in ("parameters", "artifacts"):
            by_name: dict[str, Any] = {}
            for item in list(base_args.get(kind) or []) + list(own_args.get(kind) or []):
                if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                    by_name[item["name"]] = {**by_name.get(item["name"], {}), **item}
            if by_name:
                args[kind] = list(by_name.values())
        if args:
            merged["arguments"] = args
        return merged

    def _units(
        self,
        entrypoint: str,
        spec: Mapping[str, Any],
        wf_labels: Mapping[str, str],
        wf_annotations: Mapping[str, str],
        wf_params: Mapping[str, str],
    ) -> tuple[tuple[Unit, ...], list[FieldWarning]]:
        """The entrypoint's units, and why they were kept together as one (when they were)."""
        entry = self.templates[entrypoint]
        builder = UnitBuilder(self, spec, wf_labels, wf_annotations, wf_params, self.domain)
        path = self.template_paths[entrypoint]
        whole = functools.partial(
            builder.make,
            name=entrypoint,
            kind="workflow",
            task=entrypoint,
            key=entrypoint,
            call={},
            upstream=(),
            depends="",
        )
        together: list[FieldWarning] = []
        builder.set_entry(entry)
        if isinstance(entry.get("dag"), Mapping):
            units = builder.from_dag(entry["dag"], f"{path}.dag")
        elif isinstance(entry.get("steps"), list):
            units = builder.from_steps(entry["steps"], f"{path}.steps")
        else:
            units = [whole()]
        if units:
            together = keep_together(entry, path, spec, units, self.templates, self.template_paths)
            if together:
                # One unit, one site: its Argo gives daemons, hooks and claims their scope.
                units = [
                    replace(
                        whole(), carries_exit=True, templates=self._exit_reach(entrypoint, spec)
                    )
                ]
        if any(u.kind == "workflow" for u in units) and not builder.pods_within_limit(
            entrypoint, path
        ):
            return (), together
        if len(units) > self.limits.max_units:
            self.err(
                "spec",
                f"the workflow expands to {len(units)} placement units; "
                f"the limit is {self.limits.max_units}",
            )
            return (), together
        ordered = topological_order(units)
        if ordered is None:  # checked per DAG already; a safety net for steps/expansions
            self.err("spec", "dependency cycle between units")
            return (), together
        return tuple(dedupe_slugs(ordered)), together
