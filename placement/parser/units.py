"""Placement units: one per DAG task, step, or loop item of the entrypoint, with what each
runs, reads and asks for (what a call's units share is read in ``facts``, how many items its
loop has in ``loops``)."""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from placement.parser.arguments import parse_arguments, substitute_wf_params
from placement.parser.depends import parse_depends
from placement.parser.entry import entry_inputs, expression_problems, fill_call
from placement.parser.errors import join_path
from placement.parser.expansion import substitute_item
from placement.parser.facts import CallFacts, FactsReader
from placement.parser.loops import Loops
from placement.parser.names import item_label, slugify
from placement.parser.references import TemplateIndex
from placement.parser.results import Arguments, Unit, UnitKind
from placement.parser.when import when_problem


def topological_order(units: Sequence[Unit]) -> list[Unit] | None:
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


class UnitBuilder:
    """Units of the entrypoint of a workflow whose templates ``index`` has resolved."""

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
        self.wf_params = wf_params
        self.facts = FactsReader(index, spec, wf_labels, wf_annotations, wf_params, domain)
        self.loops = Loops(index, wf_params)

    def pods_within_limit(self, key: str, path: str) -> bool:
        """Whether the pods a unit running ``key`` can create stay within the limit; if not,
        the refusal at ``path`` (the call, or the entrypoint) says how many and why."""
        counter = self.facts.pod_counter
        found = counter.count(key)
        limit = self.p.limits.max_pods_per_unit
        if found.pods <= limit:
            return True
        self.p.err(
            path,
            f"runs at one site as one unit that can create {counter.shown(found.pods)} "
            f"pods{found.describe()}; the limit is {limit} pods per unit",
        )
        return False

    def set_entry(self, entry: Mapping[str, Any]) -> None:
        """The entrypoint's inputs (by default the workflow's parameters) fill its calls."""
        self.loops.inputs = entry_inputs(entry, self.wf_params)

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
        facts: CallFacts | None = None,
    ) -> Unit:
        # ``parsed_arguments`` and ``facts``: the call's, built once for all the items of a loop.
        if facts is None:
            facts = self.facts.call_facts(kind=kind, key=key, call=call, task=task, root=root)
        arguments = (
            parse_arguments(call.get("arguments")) if parsed_arguments is None else parsed_arguments
        )
        if item_index is not None:
            arguments = substitute_item(arguments, item)
        data_refs = list(facts.refs)
        for prm in arguments.parameters:
            if prm.value:
                data_refs.append(substitute_wf_params(prm.value, self.wf_params))
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
        """The units of one call: one, or one per item of its loop when the items are known
        now; none when it is refused (the problem is reported at its field)."""
        task = str(call["name"])
        if not self.pods_within_limit(key, path):
            return []
        call = self._checked_call(call, path)
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
        loop = self.loops.resolve(call, path)
        if loop.refused:
            return []
        if loop.runtime is not None:
            return [make(name=task, with_param=loop.runtime)]
        if loop.values is None:
            return [make(name=task)]
        facts = self.facts.call_facts(kind=kind, key=key, call=call, task=task, root=root)
        return [
            make(name=f"{task}({i}:{item_label(v)})", item=v, item_index=i, facts=facts)
            for i, v in enumerate(loop.values)
        ]

    def _checked_call(self, call: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        """The call with the entrypoint's inputs filled in (known now; the step workflow could
        not fill them), its expressions and its ``when`` checked."""
        call = fill_call(call, self.loops.inputs)
        for fld, why in expression_problems(call):
            # ``fld`` is a path below the call, such as ``arguments.parameters[0].value``.
            self.p.err(f"{path}.{fld}", why)
        when = call.get("when")
        if isinstance(when, str) and when.strip():
            # The portal evaluates this one: refuse now what it could never evaluate later.
            problem = when_problem(when)
            if problem:
                self.p.err(join_path(path, "when"), problem)
        return call

    def from_dag(self, dag: Mapping[str, Any], path: str) -> list[Unit]:
        tasks = [t for t in dag.get("tasks") or [] if isinstance(t, Mapping)]
        # Keys resolved during the walk; resolving again is cheap and keeps paths right.
        expanded: dict[str, list[Unit]] = {}
        specs: list[tuple[Mapping[str, Any], str, tuple[str, ...], str, int]] = []
        for i, t in enumerate(tasks):
            tpath = f"{path}.tasks[{i}]"
            key = self.p.resolve_call(t, "", tpath)
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
        sizes = {str(t["name"]): self.loops.loop_size(t) for t, *_ in specs}
        edges = sum(
            sizes[str(t["name"])] * sum(sizes.get(d, 0) for d in up) for t, _, up, *_ in specs
        )
        if not self.loops.within_budget(list(sizes.values()), edges, f"{path}.tasks"):
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
        text = self.loops.fill_entry_parameters(target)
        if "{{" in text:
            self.p.err(
                join_path(path, "target"),
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
            self.p.err(join_path(path, "target"), f"no task named {', '.join(map(repr, unknown))}")
            return None
        keep: set[str] = set()
        stack = list(wanted)
        while stack:
            name = stack.pop()
            if name not in keep:
                keep.add(name)
                stack += [u for u in ups.get(name, ()) if u in ups]
        return keep

    def from_steps(self, steps: Sequence[Any], path: str) -> list[Unit]:
        # Each group waits for every unit of the previous one: sizes multiply into edges.
        groups = [
            [self.loops.loop_size(s) for s in g if isinstance(s, Mapping)]
            for g in steps
            if isinstance(g, list)
        ]
        sizes = [sum(g) for g in groups if g]
        edges = sum(a * b for a, b in itertools.pairwise(sizes))
        if not self.loops.within_budget(sizes, edges, path):
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
                key = self.p.resolve_call(step, "", spath)
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
