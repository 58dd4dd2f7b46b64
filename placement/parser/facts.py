"""What the units of one call share: the resources, images, datasets and data references of
every template it can run, its labels and declared output sizes, read once per template."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement import labels
from placement.parser.arguments import artifact_locations, scalar_str, substitute_wf_params
from placement.parser.errors import join_path
from placement.parser.output_sizes import declared_output_bytes
from placement.parser.pods import PodCounter
from placement.parser.references import TemplateIndex
from placement.parser.resources import max_resources, template_images, template_pod_resources
from placement.parser.results import Resources, UnitKind

# (resources, images, dataset names, data refs) of everything one template can run.
TemplateFacts = tuple[Resources, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class CallFacts:
    """What the units of one call (a task or step, and every item of its loop) share."""

    resources: Resources
    images: tuple[str, ...]
    datasets: tuple[str, ...]
    refs: tuple[str, ...]
    workflow_refs: tuple[str, ...]
    labels: dict[str, str]
    templates: tuple[str, ...]
    when: str | None
    continue_on_failed: bool
    output_bytes: int | None
    pods: int


class FactsReader:
    """Facts of the templates of one workflow whose templates ``index`` has resolved,
    memoised per template; problems found on the way are reported to ``index``."""

    def __init__(
        self,
        index: TemplateIndex,
        spec: Mapping[str, Any],
        wf_labels: Mapping[str, str],
        wf_annotations: Mapping[str, str],
        wf_params: Mapping[str, str],
        domain: str,
    ) -> None:
        self.p = index
        self.spec = spec
        self.wf_labels = wf_labels
        self.wf_params = wf_params
        self.annotation_key = labels.key(domain, labels.DATASETS)
        self.sizes_key = labels.key(domain, labels.OUTPUT_SIZES)
        self._sizes: dict[str, int | None] = {}
        # Workflow-level annotation: "name" applies to root units, "task=name" to that task.
        self.root_datasets: list[str] = []
        self.task_datasets: dict[str, list[str]] = {}
        for item in (wf_annotations.get(self.annotation_key) or "").split(","):
            item = item.strip()
            if not item:
                continue
            if "=" in item:
                task, _, ds = item.partition("=")
                self.task_datasets.setdefault(task.strip(), []).append(ds.strip())
            else:
                self.root_datasets.append(item)
        self._facts_cache: dict[str, TemplateFacts] = {}
        limits = index.limits
        self.pod_counter = PodCounter(
            index, wf_params, limits.max_pods_per_unit, limits.unknown_loop_items
        )

    def template_facts(self, key: str) -> TemplateFacts:
        """(resources, images, dataset names, data refs) of everything a template can run."""
        cached = self._facts_cache.get(key)
        if cached is not None:
            return cached
        pods: list[Resources] = []
        images: list[str] = []
        datasets: list[str] = []
        refs: list[str] = []
        wf_patch = self.spec.get("podSpecPatch")
        for k in self.p.reachable(key):
            t = self.p.templates[k]
            self.output_bytes(k)  # a malformed declaration is refused wherever it is
            pods.append(template_pod_resources(t, wf_patch, self.spec.get("podResources")))
            images += template_images(t)
            datasets += self._annotated_datasets(t)
            refs += self._input_refs(t)
        facts = (
            max_resources(pods),
            tuple(dict.fromkeys(images)),
            tuple(dict.fromkeys(datasets)),
            tuple(dict.fromkeys(refs)),
        )
        self._facts_cache[key] = facts
        return facts

    def _annotated_datasets(self, t: Mapping[str, Any]) -> list[str]:
        """The datasets a template's annotation says it reads."""
        meta = t.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, Mapping) else None
        if isinstance(ann, Mapping) and isinstance(ann.get(self.annotation_key), str):
            return [d.strip() for d in ann[self.annotation_key].split(",") if d.strip()]
        return []

    def _input_refs(self, t: Mapping[str, Any]) -> list[str]:
        """Data references in a template's inputs: artifact locations, parameter values and
        defaults (with the workflow's parameters filled in)."""
        refs: list[str] = []
        inputs = t.get("inputs")
        if not isinstance(inputs, Mapping):
            return refs
        for a in inputs.get("artifacts") or []:
            if isinstance(a, Mapping):
                refs += artifact_locations(a)
        for prm in inputs.get("parameters") or []:
            if isinstance(prm, Mapping):
                for fld in ("value", "default"):
                    v = scalar_str(prm.get(fld))
                    if v:
                        refs.append(substitute_wf_params(v, self.wf_params))
        return refs

    def output_bytes(self, key: str) -> int | None:
        """The output sizes a template declares (``output_sizes``), each template's problems
        recorded once, at the annotation's field path."""
        if key in self._sizes:
            return self._sizes[key]
        total, problems = declared_output_bytes(self.p.templates.get(key, {}), self.sizes_key)
        if problems:
            meta = join_path(self.p.template_paths.get(key, key), "metadata")
            path = join_path(meta, "annotations")
            for problem in problems:
                self.p.err(join_path(path, self.sizes_key), problem)
        self._sizes[key] = total
        return total

    def call_facts(
        self, *, kind: UnitKind, key: str, call: Mapping[str, Any], task: str, root: bool
    ) -> CallFacts:
        """What every unit of one call shares: all but its name, item and arguments."""
        resources, images, datasets, refs = self.template_facts(key)
        ds = list(datasets) + self.task_datasets.get(task, [])
        if root or kind == "workflow":
            ds += self.root_datasets
        t = self.p.templates.get(key, {})
        meta = t.get("metadata")
        unit_labels = dict(self.wf_labels)
        if isinstance(meta, Mapping) and isinstance(meta.get("labels"), Mapping):
            unit_labels.update({k: v for k, v in meta["labels"].items() if isinstance(v, str)})
        when = call.get("when")
        continue_on = call.get("continueOn")
        return CallFacts(
            resources=resources,
            images=images,
            datasets=tuple(dict.fromkeys(ds)),
            refs=refs,
            # The whole workflow is one unit: its own arguments are what it reads.
            workflow_refs=tuple(v for v in self.wf_params.values() if v)
            if kind == "workflow"
            else (),
            labels=unit_labels,
            templates=self.p.reachable(key),
            when=when if isinstance(when, str) and when.strip() else None,
            continue_on_failed=bool(isinstance(continue_on, Mapping) and continue_on.get("failed")),
            output_bytes=self.output_bytes(key),
            pods=self.pod_counter.count(key).pods,
        )
