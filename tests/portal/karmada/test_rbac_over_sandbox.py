"""The portal as its own identity (the ServiceAccount of deploy/karmada/rbac.yaml) on a sandbox
that authorises as kube-apiserver and Karmada's cluster proxy do, with the shipped RBAC on
Karmada and at every site: what the shipped grants allow works, and taking one away fails
the call with the portal's own words naming the verb and the resource."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from portal.karmada import client, errors, logs, resources
from tests.fixtures_sandbox import SandboxServer
from tests.fixtures_stack import gateway_on
from tests.sandbox.conftest import SITE_LABEL, leaf, site_policy, workflow

pytestmark = pytest.mark.integration

WF = ("argoproj.io", "v1alpha1")
PP = ("policy.karmada.io", "v1alpha1")
RBAC = "/apis/rbac.authorization.k8s.io/v1"
PORTAL_USER = "system:serviceaccount:portal:portal"


@pytest.fixture
def as_portal(sandbox: SandboxServer, settings: Any) -> Iterator[SandboxServer]:
    """The gateway on the sandbox with the portal's kubeconfig (the shipped RBAC applies)."""
    with gateway_on(sandbox, settings, KARMADA_NAMESPACE="portal"):
        yield sandbox


@pytest.fixture
def running_pod(as_portal: SandboxServer) -> str:
    """A step running at site-a for an hour of its clock (created by the admin); its pod."""
    sandbox = as_portal
    custom = k8s.CustomObjectsApi(sandbox.api_client())
    custom.create_namespaced_custom_object(
        *PP, "portal", "propagationpolicies", site_policy("site-a")
    )
    body = workflow("rbac-step", [leaf("main", duration="3600s")], labels={SITE_LABEL: "site-a"})
    custom.create_namespaced_custom_object(*WF, "portal", "workflows", body)

    def running() -> str | None:
        try:  # read as the portal reads it: its identity's grants are in play here too
            binding = client.get(resources.RESOURCE_BINDING, "rbac-step-workflow", "portal")
        except errors.NotFound:
            return None
        member = ((binding.get("status") or {}).get("aggregatedStatus") or [{}])[0]
        pods = logs.pods_of("rbac-step", member.get("status") or {})
        return next((p.pod for p in pods if p.phase == "Running"), None)

    return sandbox.wait_for(running, what="the step's pod Running at site-a")


def admin(sandbox: SandboxServer, method: str, path: str, body: Any = None) -> Any:
    return sandbox.request(method, path, body)


def without_rule(sandbox: SandboxServer, path: str, resource: str) -> None:
    """Replace the RBAC object at ``path`` with its rules minus those naming ``resource``."""
    role = admin(sandbox, "GET", path)
    role["rules"] = [r for r in role["rules"] if resource not in r.get("resources", [])]
    admin(sandbox, "PUT", path, role)


def test_the_portal_reads_a_step_log_through_the_proxy_with_the_shipped_rbac(
    running_pod: str,
) -> None:
    assert isinstance(logs.log_text("site-a", running_pod), str)


def test_without_clusters_proxy_the_log_read_fails_with_the_portals_403(
    running_pod: str, as_portal: SandboxServer
) -> None:
    without_rule(as_portal, f"{RBAC}/clusterroles/multisite-portal", "clusters/proxy")
    with pytest.raises(logs.LogsNotAvailable) as refused:
        logs.log_text("site-a", running_pod)
    text = str(refused.value)
    assert (
        f'the portal\'s identity ({PORTAL_USER}) may not get clusters/proxy "site-a" '
        "(API group cluster.karmada.io) at the cluster scope"
    ) in text
    # Karmada's own words follow, as kube-apiserver writes them.
    assert (
        f'clusters.cluster.karmada.io "site-a" is forbidden: User "{PORTAL_USER}" cannot get '
        'resource "clusters/proxy" in API group "cluster.karmada.io" at the cluster scope'
    ) in text


def test_a_site_refuses_the_proxy_when_the_portals_groups_may_not_be_impersonated(
    running_pod: str, as_portal: SandboxServer
) -> None:
    # Unified auth then no longer lets Karmada's impersonator act as the portal's groups.
    admin(as_portal, "DELETE", f"{RBAC}/clusterrolebindings/multisite-portal-proxy-groups")
    with pytest.raises(logs.LogsNotAvailable) as refused:
        logs.log_text("site-a", running_pod)
    text = str(refused.value)
    assert "the site does not let Karmada's cluster proxy act as the portal's identity" in text
    assert 'may not impersonate groups "system:serviceaccounts"' in text


def test_a_missing_semaphore_config_map_is_not_found_and_a_missing_grant_says_so(
    as_portal: SandboxServer,
) -> None:
    with pytest.raises(errors.NotFound):
        client.config_map_data("no-such-limits", "portal")
    without_rule(as_portal, f"{RBAC}/namespaces/portal/roles/multisite-portal", "configmaps")
    with pytest.raises(errors.Forbidden) as refused:
        client.config_map_data("no-such-limits", "portal")
    assert refused.value.status == 403
    assert (
        f'the portal\'s identity ({PORTAL_USER}) may not get configmaps "no-such-limits" '
        "in namespace portal"
    ) in refused.value.message


def test_a_grant_made_through_the_api_applies_at_once_and_so_does_its_removal(
    as_portal: SandboxServer,
) -> None:
    from kubernetes import config

    core = k8s.CoreV1Api(config.new_client_from_config(str(as_portal.kubeconfig)))

    def can_list() -> bool:
        try:
            core.list_namespaced_secret("portal")
        except k8s.ApiException as exc:
            assert exc.status == 403, exc.body
            return False
        return True

    assert not can_list()
    admin(
        as_portal,
        "POST",
        f"{RBAC}/namespaces/portal/roles",
        {
            "metadata": {"name": "read-secrets"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
        },
    )
    binding = {
        "metadata": {"name": "read-secrets"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "read-secrets",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "portal", "namespace": "portal"}],
    }
    admin(as_portal, "POST", f"{RBAC}/namespaces/portal/rolebindings", binding)
    assert can_list()
    admin(as_portal, "DELETE", f"{RBAC}/namespaces/portal/rolebindings/read-secrets")
    assert not can_list()


def test_an_unknown_token_is_401_and_can_i_answers_for_the_caller(as_portal: SandboxServer) -> None:
    req = urllib.request.Request(
        f"{as_portal.url}/api/v1/namespaces",
        headers={"Authorization": "Bearer not-a-token"},
    )
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(req, timeout=10)
    status = json.loads(denied.value.read())
    assert (denied.value.code, status["reason"], status["message"]) == (
        401,
        "Unauthorized",
        "Unauthorized",
    )
    # `kubectl auth can-i`, as the portal (kubectl sends no token over plain HTTP: the
    # Python client does).
    from kubernetes import config

    api = k8s.AuthorizationV1Api(config.new_client_from_config(str(as_portal.kubeconfig)))

    def can_i(verb: str, resource: str, group: str = "", **kw: str) -> bool:
        review = {
            "spec": {
                "resourceAttributes": {"verb": verb, "resource": resource, "group": group, **kw}
            }
        }
        return bool(api.create_self_subject_access_review(review).status.allowed)

    assert can_i("get", "clusters", "cluster.karmada.io", subresource="proxy")
    assert can_i("create", "workflows", "argoproj.io", namespace="portal")
    assert not can_i("create", "workflows", "argoproj.io", namespace="default")
    assert not can_i("list", "secrets", namespace="portal")


def test_a_refused_step_workflow_says_which_grant_is_missing(as_portal: SandboxServer) -> None:
    """What a unit's message and its run event then carry (``Karmada refused the step
    workflow: <this>``)."""
    without_rule(as_portal, f"{RBAC}/namespaces/portal/roles/multisite-portal", "workflows")
    body = workflow("refused-step", [leaf("main")], labels={SITE_LABEL: "site-a"})
    with pytest.raises(errors.Forbidden) as refused:
        client.create(resources.WORKFLOW, body, "portal")
    assert str(refused.value).startswith(
        f"the portal's identity ({PORTAL_USER}) may not create workflows (API group "
        "argoproj.io) in namespace portal (Karmada said: workflows.argoproj.io is forbidden:"
    )


def test_the_site_evaluates_the_impersonated_portals_own_rights(as_portal: SandboxServer) -> None:
    """Through the proxy a site answers as itself: pods/log in a namespace its RBAC does not
    grant the portal is refused there, and granted once the site holds a RoleBinding."""
    token = yaml.safe_load(as_portal.kubeconfig.read_text())["users"][0]["user"]["token"]
    path = (
        "/apis/cluster.karmada.io/v1alpha1/clusters/site-b/proxy"
        "/api/v1/namespaces/other/pods/some-pod/log"
    )

    def read() -> tuple[int, str]:
        req = urllib.request.Request(
            as_portal.url + path, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())["message"]

    assert read() == (
        403,
        f'pods "some-pod" is forbidden: User "{PORTAL_USER}" cannot get resource "pods/log" '
        'in API group "" in the namespace "other"',
    )
    before = as_portal.last_denial()
    grant = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "portal-logs", "namespace": "other"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "logs"},
        "subjects": [{"kind": "ServiceAccount", "name": "portal", "namespace": "portal"}],
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "logs"},
        "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}],
    }
    for obj in (role, grant):
        admin(as_portal, "POST", "/_sandbox/members/site-b/objects", obj)
    assert read()[0] == 404  # past RBAC: there is no such pod
    assert as_portal.denials(before) == []


def test_a_resume_the_site_may_not_write_is_an_event_naming_the_grant(
    demo_fleet: SandboxServer, scientist_api: Any
) -> None:
    """Argo's suspend-template example with clusters/proxy granted for reading only: the
    member's Workflow is read through the proxy, its write is refused, and the run's event
    says which grant is missing (the suspended node waits; nothing else breaks)."""
    from portal import tasks
    from tests.fixtures_sandbox import ARGO_EXAMPLES
    from tests.portal.test_run_controls import submit, until, waiting_gate

    path = f"{RBAC}/clusterroles/multisite-portal"
    role = admin(demo_fleet, "GET", path)
    for rule in role["rules"]:
        if "clusters/proxy" in rule["resources"]:
            rule["verbs"] = ["get"]
    admin(demo_fleet, "PUT", path, role)
    run = submit((ARGO_EXAMPLES / "suspend-template.yaml").read_text())
    approve = until(demo_fleet, lambda: waiting_gate(run), "the approval gate")
    tasks.unit_resume(approve.pk, "scientist")
    partial = run.events.get(kind="resume-partial")
    assert (
        f"the portal's identity ({PORTAL_USER}) may not update clusters/proxy "
        f'"{approve.site}" (API group cluster.karmada.io) at the cluster scope'
    ) in partial.message
    assert not run.events.filter(kind="resumed").exists()
