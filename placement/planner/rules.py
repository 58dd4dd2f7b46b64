"""Rule matching, compiled once: globs become regular expressions, and what units of one
template share is matched once per template."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from placement.parser import Unit
from placement.planner.inputs import Rule


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


@dataclass(frozen=True)
class _CompiledRule:
    rule: Rule
    template: re.Pattern[str] | None
    task: re.Pattern[str] | None
    image: re.Pattern[str] | None
    labels: tuple[tuple[str, str], ...]
    project: str | None

    def matches_static(self, unit: Unit, template_name: str, project: str | None) -> bool:
        """Everything but the task glob (what units of one template have in common)."""
        if self.project is not None and self.project != project:
            return False
        if self.template is not None and not self.template.match(template_name):
            return False
        for k, v in self.labels:
            if unit.labels.get(k) != v:
                return False
        return self.image is None or any(self.image.match(i) for i in unit.images)

    def matches(self, unit: Unit, template_name: str, project: str | None) -> bool:
        return self.matches_static(unit, template_name, project) and (
            self.task is None or _task_matches(self.task, unit)
        )


class RuleBook:
    """Enabled rules, ordered, with their globs compiled; build once and reuse across decisions."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        ordered = sorted(
            (r for r in rules if r.enabled), key=lambda r: (r.order, r.name, str(r.id))
        )
        self.rules: tuple[_CompiledRule, ...] = tuple(
            _CompiledRule(
                rule=r,
                template=_glob(r.selector.template) if r.selector.template else None,
                task=_glob(r.selector.task) if r.selector.task else None,
                image=_glob(r.selector.image) if r.selector.image else None,
                labels=tuple(sorted((str(k), str(v)) for k, v in r.selector.labels.items())),
                project=r.selector.project,
            )
            for r in ordered
        )

        self._static: dict[Any, tuple[bool, ...]] = {}
        self.keys: dict[int, tuple[Any, ...]] = {}

    def key(self, rule: Rule) -> tuple[Any, ...]:
        """What a rule's effect depends on, for caches that outlive this RuleBook."""
        key = self.keys.get(id(rule))
        if key is None:
            key = self.keys[id(rule)] = _rule_key(rule)
        return key

    def matching(self, unit: Unit, project: str | None) -> tuple[Rule, ...]:
        """Matching rules in order. All but the task glob depends on what units of one template
        share, so that part is computed once per (template, labels, images, project)."""
        name = template_display_name(unit.template)
        key = (name, tuple(sorted(unit.labels.items())), unit.images, project)
        static = self._static.get(key)
        if static is None:
            static = tuple(c.matches_static(unit, name, project) for c in self.rules)
            self._static[key] = static
        return tuple(
            c.rule
            for c, hit in zip(self.rules, static, strict=True)
            if hit and (c.task is None or _task_matches(c.task, unit))
        )


def _rule_key(rule: Rule) -> tuple[Any, ...]:
    return (rule.id, rule.name, rule.effect, json.dumps(rule.params, sort_keys=True, default=str))


def _task_matches(pattern: re.Pattern[str], unit: Unit) -> bool:
    return bool(pattern.match(unit.task) or pattern.match(unit.name))


def template_display_name(key: str) -> str:
    """The template name rules match: ``ref:wft/tmpl`` → ``tmpl``; ``inline:...`` → ``inline``."""
    if key.startswith(("ref:", "cref:")):
        return key.rpartition("/")[2]
    if key.startswith("inline:"):
        return "inline"
    return key
