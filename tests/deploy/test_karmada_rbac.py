"""What the portal writes and expects on Karmada: its RBAC, the webhook and karmada_manifests."""

from __future__ import annotations

import os

import pytest
import yaml
from django.core.management import call_command

from placement.manifests import webhook_configuration
from tests.deploy.helpers import (
    DEPLOY,
    DOCUMENTS,
    DOMAIN,
    EXAMPLE,
    grants,
    manifest_problems,
    rules_of,
)


def test_the_portal_identity_gets_exactly_what_the_gateway_calls() -> None:
    """No grant beyond what portal/karmada/ calls. That every call it makes is granted is
    checked where it counts: the integration tests run the portal as this ServiceAccount on
    a sandbox that evaluates this RBAC (and deploy/member's at the sites), and a stack test
    fails on any refusal of the portal's identity (tests/fixtures_stack.py)."""
    assert grants(rules_of("ClusterRole")) == {
        ("cluster.karmada.io", "clusters", "*"): {"get", "list", "watch"},
        ("", "namespaces", "portal"): {"get"},
        ("", "namespaces", "*"): {"create"},
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "portal-placement"): {
            "get",
            "update",
        },
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "*"): {"create"},
        # proxy.pod_log (GET) and member_workflow_get / member_workflow_replace (GET, PUT).
        ("cluster.karmada.io", "clusters/proxy", "*"): {"get", "update"},
    }
    # Only names the portal's groups for Karmada's unified auth: no request uses this verb.
    assert grants(rules_of("ClusterRole", "multisite-portal-proxy-groups")) == {
        ("cluster.karmada.io", "clusters/proxy", "*"): {"impersonate"},
    }
    crud = {"get", "list", "create", "update", "delete"}
    assert grants(rules_of("Role")) == {
        ("policy.karmada.io", "propagationpolicies", "*"): crud,
        ("policy.karmada.io", "overridepolicies", "*"): crud,
        ("argoproj.io", "workflows", "*"): {"get", "list", "watch", "create", "patch", "delete"},
        ("work.karmada.io", "resourcebindings", "*"): {"get", "list", "watch"},
        ("coordination.k8s.io", "leases", "*"): {"create"},
        ("coordination.k8s.io", "leases", "portal-watcher"): {"get", "update"},
        ("coordination.k8s.io", "leases", "portal-beat"): {"get", "update"},
        ("", "configmaps", "*"): {"get"},  # client.config_map_data (semaphore limits)
        ("", "secrets", "*"): {"get"},  # client.secret_data (signing pre-signed reads)
    }
    role = next(d for p, _, d in DOCUMENTS if p.endswith("rbac.yaml") and d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "portal"
    # At each site, as the impersonated portal: the log and the resume, nothing else.
    assert grants(rules_of("Role", folder="member")) == {
        ("", "pods/log", "*"): {"get"},
        ("argoproj.io", "workflows", "*"): {"get", "update"},
    }


def test_the_shipped_rbac_lets_the_portal_do_what_the_gateway_does() -> None:
    """The sandbox's evaluator (kube-apiserver's RBAC rules) over the shipped files, for
    each request the gateway's functions send, and Karmada's unified auth at a site."""
    from sandbox.authz.guard import load_rbac_files
    from sandbox.authz.rbac import Resolver, User
    from sandbox.authz.request import request_attributes

    karmada = Resolver(load_rbac_files([DEPLOY / "karmada" / "rbac.yaml"], "portal"))
    portal = User.service_account("portal", "portal")
    ns = "/apis/argoproj.io/v1alpha1/namespaces/portal"
    proxy = "/apis/cluster.karmada.io/v1alpha1/clusters/site-a/proxy"
    calls = [
        ("GET", "/apis/cluster.karmada.io/v1alpha1/clusters", {"watch": "true"}),
        ("GET", "/api/v1/namespaces/portal", {}),
        ("GET", "/api/v1/namespaces/portal/configmaps/limits", {}),
        ("GET", "/api/v1/namespaces/portal/secrets/site-a-artifacts-credentials", {}),
        ("POST", f"{ns}/workflows", {}),
        ("PATCH", f"{ns}/workflows/w", {}),
        ("DELETE", f"{ns}/workflows/w", {}),
        ("GET", "/apis/work.karmada.io/v1alpha2/namespaces/portal/resourcebindings", {}),
        ("PUT", "/apis/policy.karmada.io/v1alpha1/namespaces/portal/propagationpolicies/p", {}),
        (
            "PUT",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/portal-placement",
            {},
        ),
        ("GET", f"{proxy}/api/v1/namespaces/portal/pods/p/log", {}),
        ("PUT", f"{proxy}/apis/argoproj.io/v1alpha1/namespaces/portal/workflows/w", {}),
    ]
    refused = [c[:2] for c in calls if not karmada.allows(request_attributes(portal, *c))]
    assert refused == []
    # Anything else in the namespace, or another namespace, stays refused.
    assert not karmada.allows(
        request_attributes(portal, "GET", "/api/v1/namespaces/portal/secrets", {})
    )
    assert not karmada.allows(
        request_attributes(
            portal, "POST", "/apis/argoproj.io/v1alpha1/namespaces/default/workflows", {}
        )
    )


def test_the_gateway_uses_no_resource_the_rbac_does_not_grant() -> None:
    from portal.karmada import proxy, resources

    granted = {(g, r) for g, r, _ in grants(rules_of("ClusterRole")) | grants(rules_of("Role"))}
    used = {
        resources.CLUSTER,
        resources.PROPAGATION_POLICY,
        resources.OVERRIDE_POLICY,
        resources.RESOURCE_BINDING,
        resources.WORKFLOW,
        resources.LEASE,
    }
    assert {(r.group, r.plural) for r in used} <= granted
    assert ("cluster.karmada.io", "clusters/proxy") in granted
    assert "clusters/{site}/proxy" in proxy.CLUSTER_PROXY_LOG
    # ClusterPropagationPolicy is declared in portal.karmada.resources but nothing calls it;
    # granting it would let the portal place objects of any namespace.
    assert ("policy.karmada.io", "clusterpropagationpolicies") not in granted


def test_the_webhook_reference_is_what_the_portal_registers() -> None:
    shipped = yaml.safe_load((DEPLOY / "karmada" / "webhook.yaml").read_text())
    url = shipped["webhooks"][0]["clientConfig"]["url"]
    ca = shipped["webhooks"][0]["clientConfig"]["caBundle"]
    assert url.startswith("https://") and "REPLACE-WITH-PORTAL_WEBHOOK_TOKEN" in url
    expected = webhook_configuration(url, ca_bundle=ca, domain=DOMAIN)
    assert shipped == expected
    for hook in shipped["webhooks"]:
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] == 3
        assert "url" in hook["clientConfig"] and "service" not in hook["clientConfig"]
        assert hook["objectSelector"]


@pytest.mark.django_db
def test_the_example_is_what_karmada_manifests_prints_for_the_demo_fleet(settings) -> None:
    settings.PORTAL_WEBHOOK_URL = "https://portal-web.portal-system.svc:443/webhooks/placement/"
    settings.PORTAL_WEBHOOK_TOKEN = "EXAMPLE-TOKEN"
    settings.PORTAL_WEBHOOK_CA_BUNDLE = ""
    settings.KARMADA_NAMESPACE = "portal"
    settings.PORTAL_LABEL_DOMAIN = DOMAIN
    settings.PORTAL_POLICY_PREFIX = "portal-site-"
    call_command("load_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from io import StringIO

    out = StringIO()
    call_command("karmada_manifests", "--namespace-object", stdout=out)
    printed = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert printed == [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d], (
        "the demo fleet or the manifests changed: regenerate the example (see its header)"
    )
    kinds = [d["kind"] for d in printed]
    assert kinds.count("PropagationPolicy") == 7  # three sites, the fallback, a Secret per site
    for doc in printed:
        assert manifest_problems(doc) == [], doc["metadata"]["name"]


@pytest.mark.django_db
def test_karmada_manifests_with_site_overrides_validate(settings) -> None:
    call_command("load_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from io import StringIO

    from sites.models import Site

    Site.objects.filter(name="site-c").update(
        overrides={
            "artifact_repository": {"configMap": "artifact-repositories", "key": "site-s3"},
            "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
        }
    )
    out = StringIO()
    call_command("karmada_manifests", stdout=out)
    printed = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert [d["kind"] for d in printed].count("OverridePolicy") == 2
    for doc in printed:
        assert manifest_problems(doc) == [], doc["metadata"]["name"]
