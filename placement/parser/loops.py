"""The loops of a call (``withItems``, ``withSequence``, ``withParam``): how many units it
expands to, counted before any is built, and the items known at submission.

A loop is known at submission when its items are literal or read only the run's parameters
(the entrypoint's inputs are the workflow's arguments); one that reads what an earlier step
produces is expanded at run time, and the preview shows one unit for it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement import expression
from placement.parser.arguments import substitute_wf_params
from placement.parser.entry import fill_inputs, submission_scope
from placement.parser.errors import join_path
from placement.parser.expansion import (
    SequenceInvalid,
    parse_with_param_value,
    sequence_items,
    sequence_range,
)
from placement.parser.references import TemplateIndex

RUNTIME_LOOP = (
    "reads what an earlier step produces, so the loop is expanded when the run gets there: "
    "the preview shows one row for it, and each item gets its own placement decision then"
)


@dataclass(frozen=True)
class Loop:
    """What a call's loop gives: ``values`` (known items), or ``runtime`` (the ``withParam``
    to expand at run time), or neither (no loop: one unit); ``refused``: no unit at all, the
    problem is reported."""

    values: list[Any] | None = None
    runtime: str | None = None
    refused: bool = False


REFUSED = Loop(refused=True)


def loop_path(path: str, call: Mapping[str, Any]) -> str:
    """The path of the field a loop's size comes from, for the error that refuses it."""
    seq = call.get("withSequence")
    if isinstance(seq, Mapping) and call.get("withItems") is None:
        return join_path(
            join_path(path, "withSequence"), "end" if seq.get("count") is None else "count"
        )
    return join_path(path, "withItems" if call.get("withItems") is not None else "withParam")


def _not_a_list(text: str) -> str:
    try:
        parse_with_param_value(text)
    except ValueError as exc:
        return f"must be a JSON list: {exc}"
    return "must be a JSON list"


class Loops:
    """The loops of one workflow's calls, against the run's parameters and the entrypoint's
    inputs (``inputs``; by default the workflow's parameters)."""

    def __init__(self, index: TemplateIndex, wf_params: Mapping[str, str]) -> None:
        self.p = index
        self.wf_params = wf_params
        self.inputs: dict[str, str] = dict(wf_params)
        self._known: dict[str, list[Any] | None] = {}

    def resolve(self, call: Mapping[str, Any], path: str) -> Loop:
        """The call's loop: its items when known now (each count checked against the limit
        before an item is built), else how it is expanded at run time."""
        items = call.get("withItems")
        seq = call.get("withSequence")
        param = call.get("withParam")
        known = self.known_at_submit(param)
        if known is not None:
            # withParam over the run's own parameters is known now: expand like withItems.
            items, param = known, None
        if isinstance(items, list):
            return self._within_limit(items, path, call)
        if isinstance(seq, Mapping):
            return self._sequence(seq, path, call)
        if isinstance(param, str) and param.strip():
            if "{{" not in param:
                # Nothing left to fill, and not a list: it could never run (Argo fails it).
                self.p.err(join_path(path, "withParam"), _not_a_list(param))
                return REFUSED
            self.p.warn(join_path(path, "withParam"), RUNTIME_LOOP)
            return Loop(runtime=param)
        return Loop()

    def _sequence(self, seq: Mapping[str, Any], path: str, call: Mapping[str, Any]) -> Loop:
        seq = self.known_sequence(seq)
        try:
            numbers = sequence_range(seq)
        except SequenceInvalid as exc:
            self.p.err(join_path(join_path(path, "withSequence"), exc.field), str(exc))
            return REFUSED
        if numbers is None:
            # A templated sequence: only known at run time, like withParam.
            self.p.warn(join_path(path, "withSequence"), RUNTIME_LOOP)
            return Loop(runtime=json.dumps(seq))
        # The size is checked (as in loop_size) before a single item is built.
        if self.over_limit(len(numbers), loop_path(path, call)):
            return REFUSED
        return self._within_limit(sequence_items(seq, numbers), path, call)

    def _within_limit(self, values: list[Any], path: str, call: Mapping[str, Any]) -> Loop:
        if self.over_limit(len(values), loop_path(path, call)):
            return REFUSED
        return Loop(values=values)

    def over_limit(self, n: int, path: str) -> bool:
        if n <= self.p.limits.max_units:
            return False
        self.p.err(path, f"{n} items; the limit is {self.p.limits.max_units} units")
        return True

    def loop_size(self, call: Mapping[str, Any]) -> int:
        """How many units a call expands to, counted without building any (a loop that cannot
        expand counts 1: ``resolve`` reports it)."""
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
            # (A single loop over the limit is reported at its own field by ``resolve``.)
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
        text = self.fill_entry_parameters(param)
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
            k: self.fill_entry_parameters(v) if isinstance(v, str) else v for k, v in seq.items()
        }

    def fill_entry_parameters(self, text: str) -> str:
        """``{{workflow.parameters.x}}`` and the entrypoint's ``{{inputs.parameters.x}}`` (the
        workflow's arguments feed the entrypoint's inputs) filled from the run's parameters."""
        return fill_inputs(substitute_wf_params(text, self.wf_params), self.inputs)
