"""Kubernetes RBAC evaluation, as kube-apiserver's RBAC authorizer does it.

The matching functions copy ``pkg/apis/rbac/v1/evaluation_helpers.go`` (``VerbMatches``,
``APIGroupMatches``, ``ResourceMatches`` with ``*/subresource``, ``ResourceNameMatches``,
``NonResourceURLMatches`` with a trailing ``*``) and ``RuleAllows`` of
``plugin/pkg/auth/authorizer/rbac/rbac.go``. Which rules apply to a user copies
``pkg/registry/rbac/validation/rule.go`` (``VisitRulesFor``: every ClusterRoleBinding, then the
RoleBindings of the request's namespace; ``appliesToUser``: a ServiceAccount subject without a
namespace takes the binding's). A binding whose role does not exist grants nothing (upstream
reports the error and goes on). Rules are purely additive: there is no deny.

ClusterRole aggregation copies the clusterrole-aggregation controller
(``pkg/controller/clusterroleaggregation/clusterroleaggregation_controller.go``): a ClusterRole
with an ``aggregationRule`` has as rules the union of the rules of every other ClusterRole that
one of its ``clusterRoleSelectors`` selects, its own ``rules`` being replaced. Here that is
computed when the rules are resolved rather than written back into the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sandbox.selectors import match_label_selector

Obj = dict[str, Any]

ALL = "*"
SA_PREFIX = "system:serviceaccount:"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        """A ServiceAccount token's user (``serviceaccount.UserInfo``): its name and groups."""
        return cls(
            f"{SA_PREFIX}{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        )


@dataclass(frozen=True)
class Attributes:
    """``authorizer.Attributes`` of one request (``RequestInfo`` plus the user)."""

    user: User
    verb: str
    resource_request: bool = True
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""


@dataclass(frozen=True)
class Rule:
    """A PolicyRule, as sets (a rule is checked on every request)."""

    verbs: frozenset[str]
    api_groups: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str]
    non_resource_urls: tuple[str, ...]

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Rule:
        def strs(key: str) -> list[str]:
            value = raw.get(key) or []
            return [str(v) for v in value] if isinstance(value, list) else []

        return cls(
            frozenset(strs("verbs")),
            frozenset(strs("apiGroups")),
            frozenset(strs("resources")),
            frozenset(strs("resourceNames")),
            tuple(strs("nonResourceURLs")),
        )


def verb_matches(rule: Rule, verb: str) -> bool:
    return ALL in rule.verbs or verb in rule.verbs


def api_group_matches(rule: Rule, group: str) -> bool:
    return ALL in rule.api_groups or group in rule.api_groups


def resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    if ALL in rule.resources or combined in rule.resources:
        return True
    # "*/subresource" matches that subresource of every resource.
    return bool(subresource) and f"*/{subresource}" in rule.resources


def resource_name_matches(rule: Rule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: Rule, path: str) -> bool:
    for url in rule.non_resource_urls:
        if url in (ALL, path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Rule) -> bool:
    if attrs.resource_request:
        combined = attrs.resource
        if attrs.subresource:
            combined = f"{attrs.resource}/{attrs.subresource}"
        return (
            verb_matches(rule, attrs.verb)
            and api_group_matches(rule, attrs.group)
            and resource_matches(rule, combined, attrs.subresource)
            and resource_name_matches(rule, attrs.name)
        )
    return verb_matches(rule, attrs.verb) and non_resource_url_matches(rule, attrs.path)


def applies_to_user(user: User, subject: Mapping[str, Any], namespace: str) -> bool:
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = str(subject.get("namespace") or namespace)
        return bool(sa_namespace) and user.name == f"{SA_PREFIX}{sa_namespace}:{name}"
    return False


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class Resolver:
    """The rules that apply to a user in a namespace, over one snapshot of RBAC objects.
    Build a new one when the objects change; it caches per (user, namespace)."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        self.roles: dict[tuple[str, str], list[Rule]] = {}
        self.cluster_roles: dict[str, Obj] = {}
        self.role_bindings: dict[str, list[Obj]] = {}
        self.cluster_role_bindings: list[Obj] = []
        for obj in objects:
            kind, meta = obj.get("kind"), _meta(obj)
            name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
            if kind == "Role":
                self.roles[(namespace, name)] = [Rule.of(r) for r in obj.get("rules") or []]
            elif kind == "ClusterRole":
                self.cluster_roles[name] = obj
            elif kind == "RoleBinding":
                self.role_bindings.setdefault(namespace, []).append(obj)
            elif kind == "ClusterRoleBinding":
                self.cluster_role_bindings.append(obj)
        self._cluster_rules: dict[str, list[Rule]] = {}
        self._cache: dict[tuple[User, str], tuple[Rule, ...]] = {}

    def cluster_role_rules(self, name: str) -> list[Rule]:
        if name not in self._cluster_rules:
            self._cluster_rules[name] = [Rule.of(r) for r in self.raw_cluster_role_rules(name)]
        return self._cluster_rules[name]

    def raw_cluster_role_rules(self, name: str, seen: frozenset[str] = frozenset()) -> list[Obj]:
        """A ClusterRole's rules as stored, or as aggregated from the roles its
        ``aggregationRule`` selects (sorted by name, duplicates dropped, as the controller
        writes them)."""
        role = self.cluster_roles.get(name)
        if role is None:
            return []
        aggregation = role.get("aggregationRule")
        if not isinstance(aggregation, dict):
            return [r for r in role.get("rules") or [] if isinstance(r, dict)]
        selectors = [
            s for s in aggregation.get("clusterRoleSelectors") or [] if isinstance(s, dict)
        ]
        out: list[Obj] = []
        for other in sorted(self.cluster_roles):
            if other == name or other in seen:
                continue
            labels = _meta(self.cluster_roles[other]).get("labels") or {}
            if any(match_label_selector(s, labels) for s in selectors):
                for rule in self.raw_cluster_role_rules(other, seen | {name}):
                    if rule not in out:
                        out.append(rule)
        return out

    def _role_ref_rules(self, ref: Mapping[str, Any], namespace: str) -> list[Rule]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "Role":
            return self.roles.get((namespace, name), []) if namespace else []
        if kind == "ClusterRole":
            return self.cluster_role_rules(name)
        return []

    def rules_for(self, user: User, namespace: str) -> tuple[Rule, ...]:
        key = (user, namespace)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        rules: list[Rule] = []
        for binding in self.cluster_role_bindings:
            if any(applies_to_user(user, s, "") for s in _subjects(binding)):
                rules.extend(self._role_ref_rules(binding.get("roleRef") or {}, ""))
        if namespace:
            for binding in self.role_bindings.get(namespace, []):
                if any(applies_to_user(user, s, namespace) for s in _subjects(binding)):
                    rules.extend(self._role_ref_rules(binding.get("roleRef") or {}, namespace))
        if len(self._cache) > 4096:  # identities are few; this only bounds a misuse
            self._cache.clear()
        self._cache[key] = out = tuple(dict.fromkeys(rules))
        return out

    def allows(self, attrs: Attributes) -> bool:
        return any(rule_allows(attrs, r) for r in self.rules_for(attrs.user, attrs.namespace))


def _subjects(binding: Obj) -> list[Obj]:
    return [s for s in binding.get("subjects") or [] if isinstance(s, dict)]
