"""The objects the portal keeps on karmada-apiserver: one PropagationPolicy per site, the
fallback policy, a site's OverridePolicies, and the MutatingWebhookConfiguration."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from placement import labels
from placement.labels import DEFAULT_DOMAIN
from placement.manifests.names import (
    API_VERSION,
    DEFAULT_POLICY_PREFIX,
    FALLBACK_POLICY,
    FALLBACK_POLICY_PRIORITY,
    POLICY_API,
    SITE_POLICY_PRIORITY,
    WEBHOOK_NAME,
    dns_name,
    label_value,
)


def _workflow_selector(
    match_labels: Mapping[str, str], expressions: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    selector: dict[str, Any] = {"matchLabels": dict(match_labels)} if match_labels else {}
    if expressions:
        selector["matchExpressions"] = [dict(e) for e in expressions]
    return {"apiVersion": API_VERSION, "kind": "Workflow", "labelSelector": selector}


def propagation_policy(
    site: str,
    *,
    namespace: str,
    domain: str = DEFAULT_DOMAIN,
    prefix: str = DEFAULT_POLICY_PREFIX,
) -> dict[str, Any]:
    """``portal-site-<site>``: Workflows labelled ``P/site=<site>`` go to that one cluster, and
    so do runtime ones the webhook did not place whose fallback site it is
    (``P/fallback-site=<site>``): Karmada ORs a policy's resource selectors."""
    site_key = labels.key(domain, labels.SITE)
    fallback_key = labels.key(domain, labels.FALLBACK_SITE)
    return {
        "apiVersion": POLICY_API,
        "kind": "PropagationPolicy",
        "metadata": {
            "name": dns_name(prefix + site),
            "namespace": namespace,
            "labels": {labels.key(domain, labels.MANAGED): "true", site_key: label_value(site)},
        },
        "spec": {
            "resourceSelectors": [
                _workflow_selector({site_key: label_value(site)}),
                _workflow_selector({fallback_key: label_value(site)}),
            ],
            "priority": SITE_POLICY_PRIORITY,
            "placement": {"clusterAffinity": {"clusterNames": [site]}},
        },
    }


def fallback_policy(*, namespace: str, domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """Workflows the portal did not create (``P/managed`` absent) and the webhook did not
    place: Karmada picks exactly one ready cluster (spread over clusters, one group). The
    portal's own step workflows never land here: a runtime one carries a fallback site that
    satisfies its hard constraints, or waits unsubmitted."""
    managed = labels.key(domain, labels.MANAGED)
    return {
        "apiVersion": POLICY_API,
        "kind": "PropagationPolicy",
        "metadata": {
            "name": FALLBACK_POLICY,
            "namespace": namespace,
            "labels": {managed: "true"},
        },
        "spec": {
            "resourceSelectors": [
                _workflow_selector(
                    {},
                    [
                        {"key": managed, "operator": "DoesNotExist"},
                        {"key": labels.key(domain, labels.SITE), "operator": "DoesNotExist"},
                    ],
                )
            ],
            "priority": FALLBACK_POLICY_PRIORITY,
            "placement": {
                "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}]
            },
        },
    }


# The one policy that once propagated every site's repository Secret to every member: the
# policy sync deletes it where it is still there.
ARTIFACT_CREDENTIALS_POLICY = "portal-artifact-credentials"


def artifact_credentials_policy(
    site: str, secret: str, *, namespace: str, domain: str = DEFAULT_DOMAIN
) -> dict[str, Any]:
    """``portal-artifact-credentials-<site>``: the credential Secret of ``site``'s artifact
    repository (by name, as the inventory gives it), propagated to that one cluster and no
    other. Steps at the site write their outputs with it (Argo reads it in the step's own
    namespace); a step elsewhere reads them through a pre-signed URL the portal makes for
    exactly that object (``portal/presign.py``), so no member ever holds another site's keys.
    Operators create each Secret once, in the portal's namespace on karmada-apiserver. A
    PropagationPolicy, not ``propagateDeps``: a step workflow's Secret references are inside
    its artifact repository, which Karmada's Workflow interpreter does not report as a
    dependency."""
    managed = labels.key(domain, labels.MANAGED)
    return {
        "apiVersion": POLICY_API,
        "kind": "PropagationPolicy",
        "metadata": {
            "name": dns_name(f"{ARTIFACT_CREDENTIALS_POLICY}-{site}"),
            "namespace": namespace,
            "labels": {managed: "true", labels.key(domain, labels.SITE): label_value(site)},
        },
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Secret", "name": secret}],
            "placement": {"clusterAffinity": {"clusterNames": [site]}},
        },
    }


def override_policies(
    site: str,
    overrides: Mapping[str, Any],
    *,
    namespace: str,
    domain: str = DEFAULT_DOMAIN,
    prefix: str = DEFAULT_POLICY_PREFIX,
) -> list[dict[str, Any]]:
    """The site's OverridePolicy objects (empty when the site has no overrides).

    * ``artifact_repository`` (``{"configMap", "key"}``): every step workflow at the site uses
      that artifact repository (``spec.artifactRepositoryRef``).
    * ``gpu_node_selector``: a *second* policy, ``<prefix><site>-gpu``, selecting only step
      workflows labelled ``P/gpu=true``; Karmada's resource selectors are per policy, and CPU
      steps must not be pinned to GPU nodes.
    * ``image_registry_mirror`` is *not* an OverridePolicy: Karmada's imageOverrider finds
      images by itself only in Pods and built-in workloads, and needs an exact path for a
      Workflow's templates. ``mirror_images()`` rewrites the step workflow instead (when it is
      compiled for a known site, and by the webhook for runtime units).
    """
    site_key = labels.key(domain, labels.SITE)
    meta_labels = {labels.key(domain, labels.MANAGED): "true", site_key: label_value(site)}
    out: list[dict[str, Any]] = []
    repo = overrides.get("artifact_repository")
    if isinstance(repo, Mapping) and repo:
        out.append(
            _override_policy(
                dns_name(prefix + site),
                site,
                namespace=namespace,
                meta_labels=meta_labels,
                select={site_key: label_value(site)},
                path="/spec/artifactRepositoryRef",
                value=dict(repo),
            )
        )
    gpu = overrides.get("gpu_node_selector")
    if isinstance(gpu, Mapping) and gpu:
        out.append(
            _override_policy(
                dns_name(prefix + site + "-gpu"),
                site,
                namespace=namespace,
                meta_labels=meta_labels,
                select={site_key: label_value(site), labels.key(domain, labels.GPU): "true"},
                path="/spec/nodeSelector",
                value={str(k): str(v) for k, v in gpu.items()},
            )
        )
    return out


def _override_policy(
    name: str,
    site: str,
    *,
    namespace: str,
    meta_labels: Mapping[str, str],
    select: Mapping[str, str],
    path: str,
    value: Any,
) -> dict[str, Any]:
    """One OverridePolicy adding ``value`` at ``path`` of the Workflows ``select`` matches."""
    return {
        "apiVersion": POLICY_API,
        "kind": "OverridePolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(meta_labels)},
        "spec": {
            "resourceSelectors": [_workflow_selector(select)],
            "overrideRules": [
                {
                    "targetCluster": {"clusterNames": [site]},
                    "overriders": {
                        "plaintext": [{"path": path, "operator": "add", "value": value}]
                    },
                }
            ],
        },
    }


def webhook_configuration(
    url: str,
    *,
    ca_bundle: str | None = None,
    domain: str = DEFAULT_DOMAIN,
    name: str = WEBHOOK_NAME,
    timeout_seconds: int = 3,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration for karmada-apiserver: ``clientConfig.url`` (a
    ``service:`` reference would be looked up inside karmada-apiserver), never failing CREATE."""
    managed = labels.key(domain, labels.MANAGED)
    client: dict[str, Any] = {"url": url}
    if ca_bundle:
        client["caBundle"] = ca_bundle
    common: dict[str, Any] = {
        "clientConfig": client,
        "rules": [
            {
                "apiGroups": ["argoproj.io"],
                "apiVersions": ["v1alpha1"],
                "operations": ["CREATE"],
                "resources": ["workflows"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        # It records decisions, and records nothing on a dry run.
        "sideEffects": "NoneOnDryRun",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
        "reinvocationPolicy": "Never",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {managed: "true"}},
        "webhooks": [
            {
                "name": f"runtime.placement.{domain}",
                **copy.deepcopy(common),
                "objectSelector": {
                    "matchLabels": {labels.key(domain, labels.PLACEMENT): labels.RUNTIME}
                },
            },
            {
                "name": f"unmanaged.placement.{domain}",
                **copy.deepcopy(common),
                "objectSelector": {
                    "matchExpressions": [{"key": managed, "operator": "DoesNotExist"}]
                },
            },
        ],
    }


def karmada_manifests(
    sites: Iterable[str | tuple[str, Mapping[str, Any]]],
    *,
    namespace: str,
    webhook_url: str,
    ca_bundle: str | None = None,
    domain: str = DEFAULT_DOMAIN,
    prefix: str = DEFAULT_POLICY_PREFIX,
) -> list[dict[str, Any]]:
    """Everything the portal expects on karmada-apiserver, in a stable order: per-site
    propagation and override policies (sites by name), the fallback policy, the webhook.
    ``sites`` are names or ``(name, overrides)`` pairs."""
    pairs = sorted(
        ((s, {}) if isinstance(s, str) else (s[0], s[1]) for s in sites), key=lambda p: p[0]
    )
    out: list[dict[str, Any]] = []
    for site, overrides in pairs:
        out.append(propagation_policy(site, namespace=namespace, domain=domain, prefix=prefix))
        out += override_policies(site, overrides, namespace=namespace, domain=domain, prefix=prefix)
    out.append(fallback_policy(namespace=namespace, domain=domain))
    for site, overrides in pairs:
        secret = (overrides.get("artifact_store") or {}).get("credentials_secret")
        if secret:
            out.append(
                artifact_credentials_policy(site, secret, namespace=namespace, domain=domain)
            )
    out.append(webhook_configuration(webhook_url, ca_bundle=ca_bundle, domain=domain))
    return out
