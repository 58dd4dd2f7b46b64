"""The RBAC objects an API server starts with, and those Karmada's installer and its unified
auth controller add.

* Kubernetes' bootstrap policy (``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``),
  the part that matters here: ``cluster-admin`` for the group ``system:masters``,
  ``system:discovery`` (discovery paths, authenticated users only),
  ``system:public-info-viewer`` (``/version`` and the health paths, for everyone) and
  ``system:basic-user`` (``SelfSubjectAccessReview``: ``kubectl auth can-i``).
* Karmada's ``artifacts/deploy/cluster-proxy-admin-rbac.yaml``: ``clusters/proxy`` for the user
  ``system:admin``.
* What ``karmadactl register`` grants a pull-mode cluster's karmada-agent
  (``pkg/karmadactl/register/register.go``, ``GenerateRBACResources``): its Cluster and its
  status, interpreters, leases, events, its secrets in ``karmada-cluster`` and the Works of its
  execution namespace, for the user ``system:karmada:agent:<cluster>``.
* What ``pkg/controllers/unifiedauth/unified_auth_controller.go`` writes to each member: the
  ClusterRole ``karmada-impersonator`` allowing the impersonator ServiceAccount to impersonate
  every subject bound on karmada-apiserver to a ClusterRole with ``clusters/proxy`` on that
  cluster (``findRBACSubjectsWithCluster``, ``util.GenerateImpersonationRules``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API = f"{RBAC_GROUP}/v1"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}
DISCOVERY_URLS = [
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
]
PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
IMPERSONATOR = "karmada-impersonator"
# karmadactl join: the impersonator ServiceAccount in the member's karmada-cluster namespace.
IMPERSONATOR_USER = "system:serviceaccount:karmada-cluster:karmada-impersonator"


def cluster_role(name: str, rules: list[Obj], labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": meta, "rules": rules}


def cluster_role_binding(
    name: str, role: str, subjects: list[Obj], labels: dict[str, str] | None = None
) -> Obj:
    meta: Obj = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def _group(name: str) -> Obj:
    return {"apiGroup": RBAC_GROUP, "kind": "Group", "name": name}


def kubernetes_defaults() -> list[Obj]:
    b = BOOTSTRAP_LABEL
    return [
        cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
            b,
        ),
        cluster_role_binding("cluster-admin", "cluster-admin", [_group("system:masters")], b),
        cluster_role(
            "system:discovery", [{"nonResourceURLs": DISCOVERY_URLS, "verbs": ["get"]}], b
        ),
        cluster_role_binding(
            "system:discovery", "system:discovery", [_group("system:authenticated")], b
        ),
        cluster_role(
            "system:public-info-viewer", [{"nonResourceURLs": PUBLIC_URLS, "verbs": ["get"]}], b
        ),
        cluster_role_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            [_group("system:authenticated"), _group("system:unauthenticated")],
            b,
        ),
        cluster_role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
            ],
            b,
        ),
        cluster_role_binding(
            "system:basic-user", "system:basic-user", [_group("system:authenticated")], b
        ),
    ]


def karmada_defaults() -> list[Obj]:
    """Karmada's installer grants ``system:admin`` the cluster proxy. The group
    ``system:masters`` and the insecure port's ``system:unsecured`` are subjects too here (not
    upstream): the proxy impersonates every group of the caller, so upstream's admin, whose
    certificate carries that group, is refused by the member; the sandbox's admin must reach
    the members for tests and demos."""
    return [
        cluster_role(
            "cluster-proxy-admin",
            [
                {
                    "apiGroups": ["cluster.karmada.io"],
                    "resources": ["clusters/proxy"],
                    "verbs": ["*"],
                }
            ],
        ),
        cluster_role_binding(
            "cluster-proxy-admin",
            "cluster-proxy-admin",
            [
                {"apiGroup": RBAC_GROUP, "kind": "User", "name": "system:admin"},
                {"apiGroup": RBAC_GROUP, "kind": "User", "name": "system:unsecured"},
                _group("system:masters"),
            ],
        ),
    ]


def _rule_matches(rule: Obj, group: str, resource: str, name: str | None) -> bool:
    """``util.PolicyRuleAPIGroupMatches``, ``PolicyRuleResourceMatches`` (no ``*/sub`` form)
    and ``PolicyRuleResourceNameMatches`` of Karmada's ``pkg/util/rbac.go``. Verbs are not
    looked at."""
    groups = rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    names = rule.get("resourceNames") or []
    return (
        ("*" in groups or group in groups)
        and ("*" in resources or resource in resources)
        and (name is None or not names or name in names)
    )


def impersonator_objects(cluster: str, karmada_rbac: Iterable[Obj]) -> list[Obj]:
    """The ``karmada-impersonator`` ClusterRole and binding unified auth writes to
    ``cluster``, from the ClusterRoles and ClusterRoleBindings on karmada-apiserver."""
    objects = list(karmada_rbac)
    matched = set()
    for role in objects:
        if role.get("kind") != "ClusterRole":
            continue
        for rule in role.get("rules") or []:
            if _rule_matches(rule, "cluster.karmada.io", "clusters/proxy", cluster) or (
                _rule_matches(rule, "search.karmada.io", "proxying/proxy", None)
            ):
                matched.add(role["metadata"]["name"])
                break
    users: set[str] = set()
    accounts: set[str] = set()
    groups: set[str] = set()
    for binding in objects:
        ref = binding.get("roleRef") or {}
        if binding.get("kind") != "ClusterRoleBinding" or ref.get("kind") != "ClusterRole":
            continue
        if ref.get("name") not in matched:
            continue
        for subject in binding.get("subjects") or []:
            kind, name = subject.get("kind"), str(subject.get("name") or "")
            {"User": users, "ServiceAccount": accounts, "Group": groups}.get(kind, set()).add(name)
    rules = [
        {"apiGroups": [""], "resources": [res], "resourceNames": sorted(names)}
        | {"verbs": ["impersonate"]}
        for res, names in (("users", users), ("serviceaccounts", accounts), ("groups", groups))
        if names
    ]
    label = {"karmada.io/system": "true"}
    subject = {"kind": "ServiceAccount", "namespace": "karmada-cluster", "name": IMPERSONATOR}
    return [
        cluster_role(IMPERSONATOR, rules, label),
        cluster_role_binding(IMPERSONATOR, IMPERSONATOR, [subject], label),
    ]


AGENT_PREFIX = "system:karmada:agent:"
AGENT_GROUP = "system:karmada:agents"


def _role(name: str, namespace: str, rules: list[Obj]) -> Obj:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": RBAC_API, "kind": "Role", "metadata": meta, "rules": rules}


def _role_binding(name: str, namespace: str, user: str) -> Obj:
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
    }


def agent_objects(cluster: str) -> list[Obj]:
    """``GenerateRBACResources(cluster, "karmada-cluster")`` of karmadactl register."""
    user = AGENT_PREFIX + cluster
    name = f"system:karmada:{cluster}:agent"
    karmada = "cluster.karmada.io"
    rules = [
        {"apiGroups": [karmada], "resources": ["clusters"], "resourceNames": [cluster]}
        | {"verbs": ["get", "delete"]},
        {"apiGroups": [karmada], "resources": ["clusters"], "verbs": ["create", "list", "watch"]},
        {"apiGroups": [karmada], "resources": ["clusters/status"], "resourceNames": [cluster]}
        | {"verbs": ["update"]},
        {
            "apiGroups": ["config.karmada.io"],
            "resources": [
                "resourceinterpreterwebhookconfigurations",
                "resourceinterpretercustomizations",
            ],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}
        | {"verbs": ["get", "create", "update"]},
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"]}
        | {"verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["patch", "create", "update"]},
    ]
    user_subject = [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}]
    secrets = f"system:karmada:{cluster}:agent-secret"
    works = f"system:karmada:{cluster}:agent-work"
    es = f"karmada-es-{cluster}"
    return [
        cluster_role(name, rules),
        cluster_role_binding(name, name, user_subject),
        _role(
            secrets,
            "karmada-cluster",
            [
                {"verbs": ["get", "patch"], "apiGroups": [""], "resources": ["secrets"]}
                | {"resourceNames": [cluster, f"{cluster}-impersonator"]},
                {"verbs": ["create"], "apiGroups": [""], "resources": ["secrets"]},
            ],
        ),
        _role_binding(secrets, "karmada-cluster", user),
        _role(
            works,
            es,
            [
                {"apiGroups": ["work.karmada.io"], "resources": ["works"]}
                | {"verbs": ["get", "create", "list", "watch", "update", "delete"]},
                {"apiGroups": ["work.karmada.io"], "resources": ["works/status"]}
                | {"verbs": ["patch", "update"]},
            ],
        ),
        _role_binding(works, es, user),
    ]
