"""The sandbox's RBAC evaluation against Kubernetes' rules (no server): rbac.go's RuleAllows,
evaluation_helpers.go's matchers, rule.go's subjects, aggregation, and the request attributes
and 403 text kube-apiserver derives from a request."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.authz.bootstrap import impersonator_objects, kubernetes_defaults
from sandbox.authz.rbac import Attributes, Resolver, Rule, User, rule_allows
from sandbox.authz.request import forbidden, request_attributes

PORTAL = User.service_account("portal", "portal")
ALICE = User("alice", ("devs", "system:authenticated"))


def rule(**raw: Any) -> Rule:
    return Rule.of(raw)


def res(user: User, verb: str, resource: str, **kw: Any) -> Attributes:
    return Attributes(user, verb, resource=resource, **kw)


@pytest.mark.parametrize(
    ("raw", "attrs", "allowed"),
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, ("delete", "pods", ""), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, ("list", "pods", ""), False),
        # A subresource is its own resource: pods does not grant pods/log, and back.
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            ("get", "pods", "log"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ("get", "pods", ""),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ("get", "pods", "log"),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]},
            ("get", "pods", "log"),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]},
            ("get", "pods", "exec"),
            False,
        ),
        ({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}, ("get", "pods", "log"), True),
        ({"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"]}, ("get", "pods", ""), False),
    ],
)
def test_verbs_groups_resources_and_subresources_match_as_upstream(
    raw: dict[str, Any], attrs: tuple[str, str, str], allowed: bool
) -> None:
    verb, resource, sub = attrs
    assert rule_allows(res(ALICE, verb, resource, subresource=sub), rule(**raw)) is allowed


def test_resource_names_limit_to_named_objects_and_never_match_a_list() -> None:
    named = rule(apiGroups=[""], resources=["namespaces"], resourceNames=["portal"], verbs=["get"])
    assert rule_allows(res(ALICE, "get", "namespaces", name="portal"), named)
    assert not rule_allows(res(ALICE, "get", "namespaces", name="other"), named)
    assert not rule_allows(res(ALICE, "list", "namespaces"), named)


def test_non_resource_urls_match_exactly_or_by_a_trailing_star() -> None:
    discovery = rule(nonResourceURLs=["/apis/*", "/version"], verbs=["get"])
    path = Attributes(ALICE, "get", resource_request=False, path="/apis/argoproj.io/v1alpha1")
    assert rule_allows(path, discovery)
    assert not rule_allows(Attributes(ALICE, "get", resource_request=False, path="/api"), discovery)
    assert not rule_allows(
        Attributes(ALICE, "post", resource_request=False, path="/version"), discovery
    )
    # A resource rule never grants a path, nor a path rule a resource.
    assert not rule_allows(res(ALICE, "get", "pods"), discovery)


def binding(
    kind: str, name: str, role: tuple[str, str], subjects: list[dict[str, str]], ns: str = ""
) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"kind": role[0], "name": role[1]},
        "subjects": subjects,
    }


READ_PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}


def test_a_role_binding_to_a_cluster_role_grants_in_its_namespace_only() -> None:
    resolver = Resolver(
        [
            {"kind": "ClusterRole", "metadata": {"name": "reader"}, "rules": [READ_PODS]},
            binding(
                "RoleBinding",
                "r",
                ("ClusterRole", "reader"),
                [{"kind": "User", "name": "alice"}],
                "team",
            ),
        ]
    )
    assert resolver.allows(res(ALICE, "list", "pods", namespace="team"))
    assert not resolver.allows(res(ALICE, "list", "pods", namespace="other"))
    assert not resolver.allows(res(ALICE, "list", "pods"))  # cluster-wide


def test_subjects_users_groups_and_service_accounts() -> None:
    sa_no_ns = {"kind": "ServiceAccount", "name": "portal"}  # takes the binding's namespace
    resolver = Resolver(
        [
            {
                "kind": "Role",
                "metadata": {"name": "r", "namespace": "portal"},
                "rules": [READ_PODS],
            },
            binding("RoleBinding", "sa", ("Role", "r"), [sa_no_ns], "portal"),
            {"kind": "ClusterRole", "metadata": {"name": "c"}, "rules": [READ_PODS]},
            # In a ClusterRoleBinding a ServiceAccount without namespace matches nobody.
            binding("ClusterRoleBinding", "x", ("ClusterRole", "c"), [sa_no_ns]),
            binding(
                "ClusterRoleBinding", "g", ("ClusterRole", "c"), [{"kind": "Group", "name": "devs"}]
            ),
        ]
    )
    assert resolver.allows(res(PORTAL, "get", "pods", namespace="portal"))
    assert not resolver.allows(res(PORTAL, "get", "pods", namespace="elsewhere"))
    assert resolver.allows(res(ALICE, "get", "pods"))  # by her group
    assert not resolver.allows(res(User("bob"), "get", "pods"))


def test_a_binding_to_a_missing_role_grants_nothing() -> None:
    resolver = Resolver(
        [
            binding(
                "ClusterRoleBinding",
                "x",
                ("ClusterRole", "gone"),
                [{"kind": "User", "name": "alice"}],
            )
        ]
    )
    assert not resolver.allows(res(ALICE, "get", "pods"))


def test_an_aggregated_cluster_role_has_the_rules_its_selectors_pick() -> None:
    label = "rbac.example.com/aggregate-to-monitoring"
    resolver = Resolver(
        [
            {
                "kind": "ClusterRole",
                "metadata": {"name": "monitoring"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],  # replaced
            },
            {
                "kind": "ClusterRole",
                "metadata": {"name": "pods", "labels": {label: "true"}},
                "rules": [READ_PODS],
            },
            {
                "kind": "ClusterRole",
                "metadata": {"name": "other"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
            },
            binding(
                "ClusterRoleBinding",
                "m",
                ("ClusterRole", "monitoring"),
                [{"kind": "User", "name": "alice"}],
            ),
        ]
    )
    assert resolver.allows(res(ALICE, "list", "pods"))
    assert not resolver.allows(res(ALICE, "get", "secrets"))


def test_the_bootstrap_policy_lets_the_authenticated_discover_and_everyone_read_the_version() -> (
    None
):
    resolver = Resolver(kubernetes_defaults())
    anonymous = User("system:anonymous", ("system:unauthenticated",))

    def path(u: User, p: str) -> Attributes:
        return Attributes(u, "get", resource_request=False, path=p)

    assert resolver.allows(path(ALICE, "/apis/argoproj.io"))
    assert resolver.allows(path(anonymous, "/version"))
    assert not resolver.allows(path(anonymous, "/apis"))
    assert resolver.allows(res(User("root", ("system:masters",)), "delete", "anything"))


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/portal/pods", {}, ("list", "", "pods", "", "", "portal")),
        (
            "GET",
            "/api/v1/namespaces/portal/pods",
            {"watch": "true"},
            ("watch", "", "pods", "", "", "portal"),
        ),
        (
            "GET",
            "/api/v1/namespaces/portal/pods",
            {"fieldSelector": "metadata.name=a"},
            ("list", "", "pods", "", "a", "portal"),
        ),
        (
            "DELETE",
            "/apis/argoproj.io/v1alpha1/namespaces/p/workflows",
            {},
            ("deletecollection", "argoproj.io", "workflows", "", "", "p"),
        ),
        (
            "PUT",
            "/api/v1/namespaces/portal/status",
            {},
            ("update", "", "namespaces", "status", "portal", "portal"),
        ),
        ("GET", "/api/v1/namespaces/portal", {}, ("get", "", "namespaces", "", "portal", "portal")),
        (
            "GET",
            "/apis/cluster.karmada.io/v1alpha1/clusters/site-a/proxy/api/v1/namespaces/portal/pods/p/log",
            {},
            ("get", "cluster.karmada.io", "clusters", "proxy", "site-a", ""),
        ),
    ],
)
def test_request_attributes_are_read_as_kube_apiserver_reads_them(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    a = request_attributes(ALICE, method, path, query)
    assert (a.verb, a.group, a.resource, a.subresource, a.name, a.namespace) == expected
    assert a.resource_request


def test_discovery_paths_are_non_resource_requests() -> None:
    for path in (
        "/api",
        "/api/v1",
        "/apis",
        "/apis/argoproj.io",
        "/apis/argoproj.io/v1alpha1",
        "/version",
    ):
        a = request_attributes(ALICE, "GET", path, {})
        assert not a.resource_request and a.verb == "get" and a.path == path


def test_the_403_says_what_upstream_says() -> None:
    a = request_attributes(PORTAL, "GET", "/api/v1/namespaces/portal/pods/p1/log", {})
    err = forbidden(a)
    assert err.code == 403 and err.reason == "Forbidden"
    assert err.message == (
        'pods "p1" is forbidden: User "system:serviceaccount:portal:portal" cannot get '
        'resource "pods/log" in API group "" in the namespace "portal"'
    )
    lst = forbidden(
        request_attributes(PORTAL, "GET", "/apis/cluster.karmada.io/v1alpha1/clusters", {})
    )
    assert lst.message == (
        'clusters.cluster.karmada.io is forbidden: User "system:serviceaccount:portal:portal" '
        'cannot list resource "clusters" in API group "cluster.karmada.io" at the cluster scope'
    )
    path = forbidden(request_attributes(PORTAL, "GET", "/metrics", {}))
    assert (
        path.message
        == 'forbidden: User "system:serviceaccount:portal:portal" cannot get path "/metrics"'
    )


def test_unified_auth_lets_the_impersonator_act_only_as_subjects_bound_to_the_proxy() -> None:
    karmada = [
        {
            "kind": "ClusterRole",
            "metadata": {"name": "proxy-a"},
            "rules": [
                {
                    "apiGroups": ["cluster.karmada.io"],
                    "resources": ["clusters/proxy"],
                    "resourceNames": ["site-a"],
                    "verbs": ["get"],
                }
            ],
        },
        binding(
            "ClusterRoleBinding",
            "b",
            ("ClusterRole", "proxy-a"),
            [
                {"kind": "ServiceAccount", "name": "portal", "namespace": "portal"},
                {"kind": "Group", "name": "system:serviceaccounts:portal"},
            ],
        ),
        # A Role never counts (unified auth reads ClusterRoles and their ClusterRoleBindings).
        binding(
            "RoleBinding",
            "r",
            ("ClusterRole", "proxy-a"),
            [{"kind": "User", "name": "alice"}],
            "portal",
        ),
    ]
    at_a = Resolver(impersonator_objects("site-a", karmada))
    imp = User("system:serviceaccount:karmada-cluster:karmada-impersonator")

    def imp_attrs(resource: str, name: str, ns: str = "") -> Attributes:
        return Attributes(imp, "impersonate", resource=resource, name=name, namespace=ns)

    assert at_a.allows(imp_attrs("serviceaccounts", "portal", "portal"))
    assert at_a.allows(imp_attrs("groups", "system:serviceaccounts:portal"))
    assert not at_a.allows(imp_attrs("groups", "system:serviceaccounts"))
    assert not at_a.allows(imp_attrs("users", "alice"))
    at_b = Resolver(impersonator_objects("site-b", karmada))
    assert not at_b.allows(imp_attrs("serviceaccounts", "portal", "portal"))
