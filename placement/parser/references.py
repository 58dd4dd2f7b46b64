"""Semantic checks: names, template references (local and catalogue), DAG dependencies and
cycles, and which templates a template can reach."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from placement.parser.catalogue import TemplateCatalogue, missing_template_message
from placement.parser.depends import DependsSyntaxError, parse_depends
from placement.parser.errors import FieldError, Limits, WorkflowInvalid, join_path
from placement.parser.names import ARGO_FIELD_MAX, ARGO_FIELD_NAME, PARAM_NAME
from placement.parser.results import FieldWarning
from placement.parser.when import MAX_WHEN_CHARS

TEMPLATE_TYPES = (
    "container",
    "containerSet",
    "script",
    "resource",
    "dag",
    "steps",
    "suspend",
    "data",
    "http",
    "plugin",
)


def check_template(t: Any, path: str, seen: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(t, Mapping):
        return [FieldError(path, "must be an object")]
    name = t.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(join_path(path, "name"), "a template needs a name"))
    else:
        if not ARGO_FIELD_NAME.match(name) or len(name) > ARGO_FIELD_MAX:
            errors.append(
                FieldError(
                    join_path(path, "name"),
                    f"{name!r} is not a valid template name "
                    f"(letters, digits and '-', at most {ARGO_FIELD_MAX})",
                )
            )
        if name in seen:
            errors.append(
                FieldError(join_path(path, "name"), f"template {name!r} is defined more than once")
            )
        seen.add(name)
    types = [k for k in TEMPLATE_TYPES if t.get(k) is not None]
    if len(types) > 1:
        errors.append(
            FieldError(path, f"a template has exactly one type; found {', '.join(types)}")
        )
    return errors


class TemplateIndex:
    """The templates a workflow can reach, by key, with every problem found resolving them.

    Keys: a local template's name, ``"ref:<wft>/<template>"`` or ``"cref:<cwft>/<template>"``
    for a catalogue template, ``"inline:<path>"`` for an inline one. ``_Parser`` adds the
    workflow-level checks on top; ``UnitBuilder`` reads the index to build units.
    """

    def __init__(self, catalogue: TemplateCatalogue, limits: Limits) -> None:
        self.catalogue = catalogue
        self.limits = limits
        self.errors: list[FieldError] = []
        # What changes meaning across sites or between preview and run (not a refusal).
        self.warnings: list[FieldWarning] = []
        # template key -> template dict, and key -> scope ("" local, "ref:<wft>", "cref:<cwft>")
        self.templates: dict[str, Mapping[str, Any]] = {}
        self.scopes: dict[str, str] = {}
        self.template_paths: dict[str, str] = {}
        self._reach_cache: dict[str, tuple[str, ...]] = {}
        self._walked: set[str] = set()
        # Task-to-task dependencies over every DAG walked so far (Limits.max_dependency_edges).
        self._dag_edges = 0

    def err(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def warn(self, path: str, message: str) -> None:
        """A warning the preview shows (``ParsedWorkflow.warnings``): the field and what
        changes. Any check may add one; the document is still accepted."""
        self.warnings.append(FieldWarning(path, message))

    def fail_if_errors(self) -> None:
        if self.errors:
            unique = list(dict.fromkeys(self.errors))
            raise WorkflowInvalid(unique[: self.limits.max_errors])

    def _check_parameter_names(self, args: Any, path: str) -> None:
        if not isinstance(args, Mapping):
            return
        for kind in ("parameters", "artifacts"):
            names: set[str] = set()
            for i, p in enumerate(args.get(kind) or []):
                n = p.get("name") if isinstance(p, Mapping) else None
                if isinstance(n, str):
                    if not PARAM_NAME.match(n):
                        self.err(
                            f"{path}.{kind}[{i}].name",
                            f"{n!r} is not a valid name (letters, digits, '-' and '_')",
                        )
                    if n in names:
                        self.err(f"{path}.{kind}[{i}].name", f"{n!r} is given more than once")
                    names.add(n)

    # -- references ---------------------------------------------------------------------------

    def resolve_call(self, call: Any, scope: str, path: str, optional: bool = True) -> str | None:
        """Template key a step / task / hook calls, or None (error recorded)."""
        if not isinstance(call, Mapping):
            return None
        tmpl, ref, inline = call.get("template"), call.get("templateRef"), call.get("inline")
        given = [k for k, v in (("template", tmpl), ("templateRef", ref), ("inline", inline)) if v]
        if len(given) != 1:
            if given or not optional:
                self.err(
                    path,
                    "give exactly one of template, templateRef and inline"
                    if given
                    else "needs a template, templateRef or inline",
                )
            else:
                self.err(path, "needs a template, templateRef or inline")
            return None
        if tmpl:
            return self._resolve_local(tmpl, scope, join_path(path, "template"))
        if ref:
            return self._resolve_ref(ref, join_path(path, "templateRef"))
        key = f"inline:{path}"
        if isinstance(inline, Mapping):
            problems = check_template(
                {**inline, "name": inline.get("name") or "inline"}, join_path(path, "inline"), set()
            )
            self.errors += problems
            self.templates[key] = inline
            self.scopes[key] = scope
            self.template_paths[key] = join_path(path, "inline")
        return key

    def _resolve_local(self, name: str, scope: str, path: str) -> str | None:
        if not scope:
            if name in self.templates and not self.scopes.get(name):
                return name
            self.err(path, f"no template named {name!r}")
            return None
        kind, _, wft = scope.partition(":")
        return self._resolve_ref(
            {"name": wft, "template": name, "clusterScope": kind == "cref"}, path
        )

    def _resolve_ref(self, ref: Any, path: str) -> str | None:
        if not isinstance(ref, Mapping):
            return None
        name, tmpl, cluster = ref.get("name"), ref.get("template"), bool(ref.get("clusterScope"))
        what = "ClusterWorkflowTemplate" if cluster else "WorkflowTemplate"
        if not isinstance(name, str) or not name:
            self.err(join_path(path, "name"), f"required: the {what} to use")
            return None
        if not isinstance(tmpl, str) or not tmpl:
            self.err(join_path(path, "template"), "required: the template to use")
            return None
        templates = self.catalogue.templates_of(name, cluster)
        if templates is None:
            self.err(join_path(path, "name"), missing_template_message(what, name))
            return None
        if tmpl not in templates:
            self.err(join_path(path, "template"), missing_template_message(what, name, tmpl))
            return None
        scope = f"{'cref' if cluster else 'ref'}:{name}"
        key = f"{scope}/{tmpl}"
        if key not in self.templates:
            self.templates[key] = templates[tmpl]
            self.scopes[key] = scope
            self.template_paths[key] = f"{what}({name}).templates[{tmpl}]"
            self._walk_template(key, self.template_paths[key])
        return key

    def calls(self, key: str) -> Iterator[tuple[str, Mapping[str, Any], str]]:
        """(kind, call, path) for every step/task/hook/onExit call in a template."""
        t = self.templates[key]
        path = self.template_paths[key]
        steps = t.get("steps")
        if isinstance(steps, list):
            for g, group in enumerate(steps):
                for s, step in enumerate(group if isinstance(group, list) else []):
                    if isinstance(step, Mapping):
                        yield "step", step, f"{path}.steps[{g}][{s}]"
        dag = t.get("dag")
        if isinstance(dag, Mapping):
            for i, task in enumerate(dag.get("tasks") or []):
                if isinstance(task, Mapping):
                    yield "task", task, f"{path}.dag.tasks[{i}]"

    def _walk_template(self, key: str, path: str) -> None:
        if key in self._walked:
            return
        self._walked.add(key)
        t = self.templates[key]
        scope = self.scopes[key]
        self._check_parameter_names(t.get("inputs"), join_path(path, "inputs"))
        for kind, call, cpath in list(self.calls(key)):
            self._check_call(kind, call, cpath, scope)
        dag = t.get("dag")
        if isinstance(dag, Mapping):
            self._check_dag(dag, join_path(path, "dag"))
        steps = t.get("steps")
        if isinstance(steps, list):
            names: set[str] = set()
            for g, group in enumerate(steps):
                for s, step in enumerate(group if isinstance(group, list) else []):
                    n = step.get("name") if isinstance(step, Mapping) else None
                    if isinstance(n, str):
                        if n in names:
                            self.err(
                                f"{path}.steps[{g}][{s}].name",
                                f"step name {n!r} is used more than once",
                            )
                        names.add(n)
        for hook_name, hook in (
            (t.get("hooks") or {}).items() if isinstance(t.get("hooks"), Mapping) else []
        ):
            self.resolve_call(
                hook, scope, join_path(join_path(path, "hooks"), hook_name), optional=False
            )

    def _check_call(self, kind: str, call: Mapping[str, Any], path: str, scope: str) -> None:
        name = call.get("name")
        if (
            not isinstance(name, str)
            or not ARGO_FIELD_NAME.match(name)
            or len(name) > ARGO_FIELD_MAX
        ):
            self.err(
                join_path(path, "name"),
                f"{name!r} is not a valid {kind} name "
                f"(letters, digits and '-', at most {ARGO_FIELD_MAX})",
            )
        key = self.resolve_call(call, scope, path, optional=False)
        if key is not None and key.startswith("inline:"):
            self._walk_template(key, self.template_paths[key])
        on_exit = call.get("onExit")
        if isinstance(on_exit, str) and on_exit:
            self._resolve_local(on_exit, scope, join_path(path, "onExit"))
        hooks = call.get("hooks")
        if isinstance(hooks, Mapping):
            for hook_name, hook in hooks.items():
                self.resolve_call(
                    hook, scope, join_path(join_path(path, "hooks"), hook_name), optional=False
                )
        self._check_parameter_names(call.get("arguments"), join_path(path, "arguments"))
        when = call.get("when")
        if isinstance(when, str) and len(when) > MAX_WHEN_CHARS:
            self.err(
                join_path(path, "when"),
                f"expression is {len(when)} characters long; the limit is {MAX_WHEN_CHARS}",
            )
        items = [k for k in ("withItems", "withParam", "withSequence") if call.get(k) is not None]
        if len(items) > 1:
            self.err(path, f"use only one of {', '.join(items)}")

    def _check_dag(self, dag: Mapping[str, Any], path: str) -> None:
        tasks = [t for t in dag.get("tasks") or [] if isinstance(t, Mapping)]
        index: dict[str, int] = {}
        for i, t in enumerate(tasks):
            n = t.get("name")
            if isinstance(n, str):
                if n in index:
                    self.err(f"{path}.tasks[{i}].name", f"task name {n!r} is used more than once")
                else:
                    index[n] = i
        uses_depends = any(t.get("depends") for t in tasks) or bool(dag.get("target"))
        edges: dict[str, list[str]] = {n: [] for n in index}
        for i, t in enumerate(tasks):
            n = t.get("name")
            tpath = f"{path}.tasks[{i}]"
            upstream = self._task_upstream(t, tpath, index)
            if uses_depends and isinstance(n, str) and n[:1].isdigit():
                self.err(
                    f"{tpath}.name",
                    f"task name {n!r} cannot begin with a digit when depends is used",
                )
            if isinstance(n, str) and n in edges:
                edges[n] = upstream
        before = self._dag_edges
        self._dag_edges += sum(len(up) for up in edges.values())
        if self._dag_edges > self.limits.max_dependency_edges:
            # Checked before cycles are looked for, units built or anything planned: the work
            # of every later step grows with the edges. Said once, where the limit is crossed.
            if before <= self.limits.max_dependency_edges:
                self.err(
                    join_path(path, "tasks"),
                    f"{self._dag_edges} dependencies between tasks; the limit is "
                    f"{self.limits.max_dependency_edges}",
                )
            return
        target = dag.get("target")
        if isinstance(target, str) and target.strip():
            for tname in re.split(r"[\s,]+", target.strip()):
                if tname and tname not in index and "{{" not in tname:
                    self.err(join_path(path, "target"), f"no task named {tname!r} in this DAG")
        cycle = _find_cycle(edges)
        if cycle:
            first = cycle[0]
            self.err(
                f"{path}.tasks[{index[first]}]"
                + (".depends" if tasks[index[first]].get("depends") else ".dependencies"),
                f"dependency cycle: {' -> '.join([*cycle, first])}",
            )

    def _task_upstream(
        self, task: Mapping[str, Any], tpath: str, index: Mapping[str, int]
    ) -> list[str]:
        """The tasks of this DAG one task waits for, from ``dependencies`` or ``depends``."""
        deps = task.get("dependencies")
        depends = task.get("depends")
        if deps and depends:
            self.err(tpath, "use either depends or dependencies, not both")
        upstream: list[str] = []
        if isinstance(deps, list):
            for j, d in enumerate(deps):
                if d not in index:
                    self.err(f"{tpath}.dependencies[{j}]", f"no task named {d!r} in this DAG")
                else:
                    upstream.append(d)
        if isinstance(depends, str) and depends.strip():
            try:
                tree = parse_depends(depends)
            except DependsSyntaxError as exc:
                self.err(f"{tpath}.depends", f"cannot parse {depends!r}: {exc}")
            else:
                for d in sorted(tree.tasks()):
                    if d not in index:
                        self.err(f"{tpath}.depends", f"no task named {d!r} in this DAG")
                    else:
                        upstream.append(d)
        return upstream

    # -- reachability and unit facts -------------------------------------------------------------

    def reachable(self, key: str) -> tuple[str, ...]:
        """The template itself first, then every template it can call, in discovery order."""
        cached = self._reach_cache.get(key)
        if cached is not None:
            return cached
        order: list[str] = []
        seen: set[str] = set()
        stack = [key]
        while stack:
            k = stack.pop()
            if k in seen or k not in self.templates:
                continue
            seen.add(k)
            order.append(k)
            scope = self.scopes[k]
            found: list[str] = []
            for _kind, call, cpath in self.calls(k):
                for target in self.call_targets(call, scope, cpath):
                    found.append(target)
            t = self.templates[k]
            hooks = t.get("hooks")
            if isinstance(hooks, Mapping):
                for hook_name, hook in hooks.items():
                    found += self.call_targets(hook, scope, join_path("hooks", hook_name))
            stack.extend(reversed(found))
        result = tuple(order)
        self._reach_cache[key] = result
        return result

    def call_targets(self, call: Mapping[str, Any], scope: str, path: str) -> list[str]:
        """The templates a call runs: its template, its ``onExit`` and its hooks' templates."""
        out: list[str] = []
        # Resolution already succeeded during the walk; errors here would be duplicates.
        saved = len(self.errors)
        k = self.resolve_call(call, scope, path)
        if k:
            out.append(k)
        on_exit = call.get("onExit")
        if isinstance(on_exit, str) and on_exit:
            k2 = self._resolve_local(on_exit, scope, path)
            if k2:
                out.append(k2)
        hooks = call.get("hooks")
        if isinstance(hooks, Mapping):
            for hook in hooks.values():
                k3 = self.resolve_call(hook, scope, path)
                if k3:
                    out.append(k3)
        del self.errors[saved:]
        return out


def _find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle (list of task names) or None. Iterative DFS: no recursion limits."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    for start in edges:
        if colour[start] != white:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        colour[start] = grey
        trail = [start]
        while stack:
            node, i = stack[-1]
            deps = edges.get(node, ())
            if i < len(deps):
                stack[-1] = (node, i + 1)
                nxt = deps[i]
                if colour.get(nxt, black) == grey:
                    return list(reversed(trail[trail.index(nxt) :]))
                if colour.get(nxt) == white:
                    colour[nxt] = grey
                    stack.append((nxt, 0))
                    trail.append(nxt)
            else:
                colour[node] = black
                stack.pop()
                trail.pop()
    return None
