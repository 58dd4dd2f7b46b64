"""Placement units: one per DAG task, step, or loop item of the entrypoint, with what each
runs, reads and asks for."""

from __future__ import annotations

import functools
import heapq
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from placement import expression, labels
from placement.parser.arguments import (
    _scalar_str,
    _substitute_wf_params,
    artifact_locations,
    parse_arguments,
)
from placement.parser.depends import parse_depends
from placement.parser.entry import (
    entry_inputs,
    expression_problems,
    fill_call,
    fill_inputs,
    submission_scope,
)
from placement.parser.errors import _join
from placement.parser.expansion import (
    SequenceInvalid,
    parse_with_param_value,
    sequence_items,
    sequence_range,
    substitute_item,
)
from placement.parser.names import item_label, slugify
from placement.parser.output_sizes import declared_output_bytes
from placement.parser.pods import PodCounter
from placement.parser.references import _TemplateIndex
from placement.parser.resources import _max, template_images, template_pod_resources
from placement.parser.results import Arguments, Resources, Unit, UnitKind
from placement.parser.when import when_problem


@dataclass(frozen=True)
class _CallFacts:
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


def _topological(units: Sequence[Unit]) -> list[Unit] | None:
    """Kahn's algorithm, stable: among ready units the one given first goes first."""
    by_name = {u.name: u for u in units}
    position = {u.name: i for i, u in enumerate(units)}
    pending = {u.name: sum(1 for d in set(u.upstream) if d in by_name) for u in units}
    children: dict[str, list[str]] = {u.name: [] for u in units}
    for u in units:
        for d in set(u.upstream):
            if d in children:
                children[d].append(u.name)
    ready = [(position[n], n) for n, c in pending.items() if c == 0]
    heapq.heapify(ready)
    out: list[Unit] = []
    while ready:
        _, n = heapq.heappop(ready)
        out.append(by_name[n])
        for c in children[n]:
            pending[c] -= 1
            if pending[c] == 0:
                heapq.heappush(ready, (position[c], c))
    return out if len(out) == len(units) else None


def _loop_path(path: str, call: Mapping[str, Any]) -> str:
    """The path of the field a loop's size comes from, for the error that refuses it."""
    seq = call.get("withSequence")
    if isinstance(seq, Mapping) and call.get("withItems") is None:
        return _join(_join(path, "withSequence"), "end" if seq.get("count") is None else "count")
    return _join(path, "withItems" if call.get("withItems") is not None else "withParam")


RUNTIME_LOOP = (
    "reads what an earlier step produces, so the loop is expanded when the run gets there: "
    "the preview shows one row for it, and each item gets its own placement decision then"
)


def _not_a_list(text: str) -> str:
    try:
        parse_with_param_value(text)
    except ValueError as exc:
        return f"must be a JSON list: {exc}"
    return "must be a JSON list"


class _UnitBuilder:
    """Units of the entrypoint of a workflow whose templates ``parser`` has resolved."""

    def __init__(
        self,
        parser: _TemplateIndex,
        spec: Mapping[str, Any],
        wf_labels: Mapping[str, str],
        wf_annotations: Mapping[str, str],
        wf_params: Mapping[str, str],
        domain: str,
    ) -> None:
        self.p = parser
        self.spec = spec
        self.wf_labels = wf_labels
        self.wf_params = wf_params
        # The entrypoint's inputs (``set_entry``); by default the workflow's parameters.
        self.inputs: dict[str, str] = dict(wf_params)
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
        self._known: dict[str, list[Any] | None] = {}
        self._facts_cache: dict[
            str, tuple[Resources, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
        ] = {}
        limits = parser.limits
        self.pod_counter = PodCounter(
            parser, wf_params, limits.max_pods_per_unit, limits.unknown_loop_items
        )

    def pods_within_limit(self, key: str, path: str) -> bool:
        """Whether the pods a unit running ``key`` can create stay within the limit; if not,
        the refusal at ``path`` (the call, or the entrypoint) says how many and why."""
        found = self.pod_counter.count(key)
        limit = self.p.limits.max_pods_per_unit
        if found.pods <= limit:
            return True
        self.p.err(
            path,
            f"runs at one site as one unit that can create {self.pod_counter.shown(found.pods)} "
            f"pods{found.describe()}; the limit is {limit} pods per unit",
        )
        return False

    def set_entry(self, entry: Mapping[str, Any]) -> None:
        self.inputs = entry_inputs(entry, self.wf_params)

    def template_facts(
        self, key: str
    ) -> tuple[Resources, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
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
            meta = t.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, Mapping) else None
            if isinstance(ann, Mapping) and isinstance(ann.get(self.annotation_key), str):
                datasets += [d.strip() for d in ann[self.annotation_key].split(",") if d.strip()]
            inputs = t.get("inputs")
            if isinstance(inputs, Mapping):
                for a in inputs.get("artifacts") or []:
                    if isinstance(a, Mapping):
                        refs += artifact_locations(a)
                for prm in inputs.get("parameters") or []:
                    if isinstance(prm, Mapping):
                        for fld in ("value", "default"):
                            v = _scalar_str(prm.get(fld))
                            if v:
                                refs.append(_substitute_wf_params(v, self.wf_params))
        facts = (
            _max(pods),
            tuple(dict.fromkeys(images)),
            tuple(dict.fromkeys(datasets)),
            tuple(dict.fromkeys(refs)),
        )
        self._facts_cache[key] = facts
        return facts

    def output_bytes(self, key: str) -> int | None:
        """The output sizes a template declares (``output_sizes``), each template's problems
        recorded once, at the annotation's field path."""
        if key in self._sizes:
            return self._sizes[key]
        total, problems = declared_output_bytes(self.p.templates.get(key, {}), self.sizes_key)
        if problems:
            path = _join(_join(self.p.template_paths.get(key, key), "metadata"), "annotations")
            for problem in problems:
                self.p.err(_join(path, self.sizes_key), problem)
        self._sizes[key] = total
        return total

    def call_facts(
        self, *, kind: UnitKind, key: str, call: Mapping[str, Any], task: str, root: bool
    ) -> _CallFacts:
        """What every unit of one call shares: all but its name, item and arguments."""
        resources, images, datasets, refs = self.template_facts(key)
        ds = list(datasets) + self.task_datasets.get(task, [])
        if root or kind == "workflow":
            ds += self.root_datasets
        t = self.p.templates.get(key, {})
        meta = t.get("metadata")
        labels = dict(self.wf_labels)
        if isinstance(meta, Mapping) and isinstance(meta.get("labels"), Mapping):
            labels.update({k: v for k, v in meta["labels"].items() if isinstance(v, str)})
        when = call.get("when")
        continue_on = call.get("continueOn")
        return _CallFacts(
            resources=resources,
            images=images,
            datasets=tuple(dict.fromkeys(ds)),
            refs=refs,
            # The whole workflow is one unit: its own arguments are what it reads.
            workflow_refs=tuple(v for v in self.wf_params.values() if v)
            if kind == "workflow"
            else (),
            labels=labels,
            templates=self.p.reachable(key),
            when=when if isinstance(when, str) and when.strip() else None,
            continue_on_failed=bool(isinstance(continue_on, Mapping) and continue_on.get("failed")),
            output_bytes=self.output_bytes(key),
            pods=self.pod_counter.count(key).pods,
        )

    def make(
        self,
        *,
        name: str,
        kind: UnitKind,
        task: str,
        key: str,
        call: Mapping[str, Any],
        upstream: tuple[str, ...],
        depends: str,
        item: Any = None,
        item_index: int | None = None,
        with_param: str | None = None,
        root: bool = False,
        parsed_arguments: Arguments | None = None,
        facts: _CallFacts | None = None,
    ) -> Unit:
        # ``parsed_arguments`` and ``facts``: the call's, built once for all the items of a loop.
        if facts is None:
            facts = self.call_facts(kind=kind, key=key, call=call, task=task, root=root)
        arguments = (
            parse_arguments(call.get("arguments")) if parsed_arguments is None else parsed_arguments
        )
        if item_index is not None:
            arguments = substitute_item(arguments, item)
        data_refs = list(facts.refs)
        for prm in arguments.parameters:
            if prm.value:
                data_refs.append(_substitute_wf_params(prm.value, self.wf_params))
        for art in arguments.artifacts:
            data_refs += art.locations
        data_refs += facts.workflow_refs
        return Unit(
            name=name,
            slug=slugify(name),
            kind=kind,
            task=task,
            template=key,
            templates=facts.templates,
            upstream=upstream,
            depends=depends,
            when=facts.when,
            arguments=arguments,
            labels=dict(facts.labels),
            images=facts.images,
            resources=facts.resources,
            datasets=facts.datasets,
            # Still-templated values ({{tasks...}}) cannot name a dataset before run time.
            data_refs=tuple(dict.fromkeys(r for r in data_refs if r and "{{" not in r)),
            item=item,
            item_index=item_index,
            with_param=with_param,
            continue_on_failed=facts.continue_on_failed,
            output_bytes=facts.output_bytes,
            pods=facts.pods,
        )

    def expand(
        self,
        *,
        kind: UnitKind,
        call: Mapping[str, Any],
        key: str,
        upstream: tuple[str, ...],
        depends: str,
        root: bool,
        path: str,
    ) -> list[Unit]:
        task = str(call["name"])
        if not self.pods_within_limit(key, path):
            return []
        # The entrypoint's inputs are known now; the step workflow could not fill them.
        call = fill_call(call, self.inputs)
        for fld, why in expression_problems(call):
            # ``fld`` is a path below the call, such as ``arguments.parameters[0].value``.
            self.p.err(f"{path}.{fld}", why)
        # Every unit of this call shares these; only name, item and withParam differ.
        make = functools.partial(
            self.make,
            kind=kind,
            task=task,
            key=key,
            call=call,
            upstream=upstream,
            depends=depends,
            root=root,
            parsed_arguments=parse_arguments(call.get("arguments")),
        )
        when = call.get("when")
        if isinstance(when, str) and when.strip():
            # The portal evaluates this one: refuse now what it could never evaluate later.
            problem = when_problem(when)
            if problem:
                self.p.err(_join(path, "when"), problem)
        items = call.get("withItems")
        seq = call.get("withSequence")
        param = call.get("withParam")
        known = self.known_at_submit(param)
        if known is not None:
            # withParam over the run's own parameters is known now: expand like withItems.
            items, param = known, None
        if isinstance(items, list) or isinstance(seq, Mapping):
            if isinstance(items, list):
                values: list[Any] = items
            else:
                assert isinstance(seq, Mapping)
                seq = self.known_sequence(seq)
                try:
                    numbers = sequence_range(seq)
                except SequenceInvalid as exc:
                    self.p.err(_join(_join(path, "withSequence"), exc.field), str(exc))
                    return []
                if numbers is None:
                    # A templated sequence: only known at run time, like withParam.
                    self.p.warn(_join(path, "withSequence"), RUNTIME_LOOP)
                    return [make(name=task, with_param=json.dumps(seq))]
                # The size is checked (in loop_size) before a single item is built.
                if self.over_limit(len(numbers), _loop_path(path, call)):
                    return []
                values = sequence_items(seq, numbers)
            if self.over_limit(len(values), _loop_path(path, call)):
                return []
            facts = self.call_facts(kind=kind, key=key, call=call, task=task, root=root)
            return [
                make(name=f"{task}({i}:{item_label(v)})", item=v, item_index=i, facts=facts)
                for i, v in enumerate(values)
            ]
        if isinstance(param, str) and param.strip():
            if "{{" not in param:
                # Nothing left to fill, and not a list: it could never run (Argo fails it).
                self.p.err(_join(path, "withParam"), _not_a_list(param))
                return []
            self.p.warn(_join(path, "withParam"), RUNTIME_LOOP)
            return [make(name=task, with_param=param)]
        return [make(name=task)]

    def over_limit(self, n: int, path: str) -> bool:
        if n <= self.p.limits.max_units:
            return False
        self.p.err(path, f"{n} items; the limit is {self.p.limits.max_units} units")
        return True

    def loop_size(self, call: Mapping[str, Any]) -> int:
        """How many units a call expands to, counted without building any (a loop that cannot
        expand counts 1: ``expand`` reports it)."""
        known = self.known_at_submit(call.get("withParam"))
        items = known if known is not None else call.get("withItems")
        if isinstance(items, list):
            return len(items)
        seq = call.get("withSequence")
        if isinstance(seq, Mapping):
            try:
                numbers = sequence_range(self.known_sequence(seq))
            except SequenceInvalid:
                return 1
            return 1 if numbers is None else len(numbers)
        return 1

    def within_budget(self, sizes: Sequence[int], edges: int, path: str) -> bool:
        """Whether the units and unit-to-unit edges these loops give stay within the limits,
        decided before any unit is built (a fan-out of fan-outs is refused by arithmetic)."""
        limits = self.p.limits
        total = sum(sizes)
        ok = True
        if total > limits.max_units and max(sizes, default=0) <= limits.max_units:
            # (A single loop over the limit is reported at its own field by ``expand``.)
            self.p.err(
                path,
                f"the loops here expand to {total} placement units; the limit is "
                f"{limits.max_units}",
            )
            ok = False
        if edges > limits.max_dependency_edges:
            self.p.err(
                path,
                f"the dependencies here expand to {edges} unit-to-unit edges; the limit is "
                f"{limits.max_dependency_edges}",
            )
            ok = False
        return ok

    def known_at_submit(self, param: Any) -> list[Any] | None:
        """The list a ``withParam`` names when it only uses workflow parameters (the
        entrypoint's inputs are the workflow's arguments), else None (expanded at run time)."""
        if not isinstance(param, str) or not param.strip():
            return None
        # Counted before expanding, then expanded: decode each list once.
        if param not in self._known:
            self._known[param] = self._known_at_submit(param)
        return self._known[param]

    def _known_at_submit(self, param: str) -> list[Any] | None:
        text = self._fill_entry_parameters(param)
        try:
            # An expression over the run's parameters only is known now too (Argo evaluates
            # it before expanding); one that reads outputs waits for the run.
            text = expression.fill_expressions(text, submission_scope(self.inputs, self.wf_params))
            if "{{" in text:
                return None
            return parse_with_param_value(text)
        except ValueError:
            return None

    def known_sequence(self, seq: Mapping[str, Any]) -> Mapping[str, Any]:
        """A ``withSequence`` with the run's parameters filled into its fields: known at
        submission (expanded in the preview) unless a field reads an upstream output."""
        return {
            k: self._fill_entry_parameters(v) if isinstance(v, str) else v for k, v in seq.items()
        }

    def from_dag(self, dag: Mapping[str, Any], path: str) -> list[Unit]:
        tasks = [t for t in dag.get("tasks") or [] if isinstance(t, Mapping)]
        # Keys resolved during the walk; resolving again is cheap and keeps paths right.
        expanded: dict[str, list[Unit]] = {}
        specs: list[tuple[Mapping[str, Any], str, tuple[str, ...], str, int]] = []
        for i, t in enumerate(tasks):
            tpath = f"{path}.tasks[{i}]"
            key = self.p._resolve_call(t, "", tpath)
            deps = t.get("dependencies")
            depends = t.get("depends")
            if isinstance(depends, str) and depends.strip():
                expr = depends.strip()
                up = tuple(sorted(parse_depends(expr).tasks()))
            elif isinstance(deps, list) and deps:
                up = tuple(str(d) for d in deps)
                expr = " && ".join(up)
            else:
                up, expr = (), ""
            if key is not None:
                specs.append((t, key, up, expr, i))
        sizes = {str(t["name"]): self.loop_size(t) for t, *_ in specs}
        edges = sum(
            sizes[str(t["name"])] * sum(sizes.get(d, 0) for d in up) for t, _, up, *_ in specs
        )
        if not self.within_budget(list(sizes.values()), edges, f"{path}.tasks"):
            return []
        keep = self.dag_targets(dag, tasks, path)
        if keep is not None:
            specs = [spec for spec in specs if str(spec[0].get("name")) in keep]
        for t, key, up, expr, i in specs:
            expanded[str(t["name"])] = self.expand(
                kind="task",
                call=t,
                key=key,
                upstream=up,
                depends=expr,
                root=not up,
                path=f"{path}.tasks[{i}]",
            )
        out: list[Unit] = []
        for units in expanded.values():
            for u in units:
                if not u.upstream:  # the items of a root task: nothing to rename
                    out.append(u)
                    continue
                names = tuple(n.name for d in u.upstream for n in expanded.get(d, ()))
                out.append(replace(u, upstream=names))
        return out

    def dag_targets(
        self, dag: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]], path: str
    ) -> set[str] | None:
        """Argo's ``dag.target`` (space-separated task names, often
        ``{{workflow.parameters.target}}``): the named tasks and everything they depend on, or
        None for every task. Filled from the run's parameters, so it is known at submission."""
        target = dag.get("target")
        if not isinstance(target, str) or not target.strip():
            return None
        text = self._fill_entry_parameters(target)
        if "{{" in text:
            self.p.err(
                _join(path, "target"),
                "must be known at submission (task names, or workflow parameters that name them)",
            )
            return None
        ups: dict[str, tuple[str, ...]] = {}
        for t in tasks:
            deps, depends = t.get("dependencies"), t.get("depends")
            if isinstance(depends, str) and depends.strip():
                ups[str(t.get("name"))] = tuple(parse_depends(depends.strip()).tasks())
            else:
                ups[str(t.get("name"))] = tuple(str(d) for d in deps or [])
        wanted = [n for n in text.split(" ") if n]
        unknown = [n for n in wanted if n not in ups]
        if unknown:
            self.p.err(_join(path, "target"), f"no task named {', '.join(map(repr, unknown))}")
            return None
        keep: set[str] = set()
        stack = list(wanted)
        while stack:
            name = stack.pop()
            if name not in keep:
                keep.add(name)
                stack += [u for u in ups.get(name, ()) if u in ups]
        return keep

    def _fill_entry_parameters(self, text: str) -> str:
        """``{{workflow.parameters.x}}`` and the entrypoint's ``{{inputs.parameters.x}}`` (the
        workflow's arguments feed the entrypoint's inputs) filled from the run's parameters."""
        return fill_inputs(_substitute_wf_params(text, self.wf_params), self.inputs)

    def from_steps(self, steps: Sequence[Any], path: str) -> list[Unit]:
        # Each group waits for every unit of the previous one: sizes multiply into edges.
        groups = [
            [self.loop_size(s) for s in g if isinstance(s, Mapping)]
            for g in steps
            if isinstance(g, list)
        ]
        sizes = [sum(g) for g in groups if g]
        edges = sum(a * b for a, b in itertools.pairwise(sizes))
        if not self.within_budget(sizes, edges, path):
            return []
        out: list[Unit] = []
        previous: list[Unit] = []
        previous_tasks: list[str] = []
        for g, group in enumerate(steps):
            current: list[Unit] = []
            for s, step in enumerate(group if isinstance(group, list) else []):
                if not isinstance(step, Mapping):
                    continue
                spath = f"{path}[{g}][{s}]"
                key = self.p._resolve_call(step, "", spath)
                if key is None:
                    continue
                # Each group starts when the previous group is complete (any outcome that lets
                # Argo go on: a failed step stops the workflow unless continueOn says otherwise).
                depends = " && ".join(dict.fromkeys(previous_tasks))
                units = self.expand(
                    kind="step",
                    call=step,
                    key=key,
                    upstream=tuple(u.name for u in previous),
                    depends=depends,
                    root=not previous,
                    path=spath,
                )
                current += units
            if current:
                out += current
                previous = current
                previous_tasks = [u.task for u in current]
        return out
