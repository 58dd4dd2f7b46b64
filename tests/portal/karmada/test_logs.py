"""Logs where Karmada's cluster proxy has no path to the site, on a fleet of its own: site-p is
a pull-mode site whose karmada-agent ran with `--report-secrets=None` (no impersonator secret),
site-q one with the agent's default (readable, until the site is unreachable). The step really
runs at the site (simulated), so the pod names come from Karmada as for any run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from kubernetes import client as k8s

from portal.choices import RunStatus, UnitPhase
from portal.karmada import client, logs
from portal.models import UnitRun, WorkflowRun
from sites.choices import SyncMode
from tests.factories import SiteFactory
from tests.fixtures_sandbox import SandboxServer, sandbox_on_fleet
from tests.portal.helpers import make_run
from tests.sandbox.conftest import SITE_LABEL, leaf, site_policy, workflow

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
RanAt = Callable[[WorkflowRun, str], None]
PP = ("policy.karmada.io", "v1alpha1")
WF = ("argoproj.io", "v1alpha1")


@pytest.fixture
def run(db: Any, scientist: User, project: Any) -> WorkflowRun:
    SiteFactory(name="site-p", sync_mode=SyncMode.PULL)
    return make_run(
        scientist,
        project=project,
        status=RunStatus.SUCCEEDED,
        units=[("inference", "site-p", UnitPhase.SUCCEEDED, [])],
    )


# A fleet of its own: site-p's karmada-agent ran with `--report-secrets=None`, site-q with its
# default (reachable through the proxy unless the site-unreachable fault is set).
NO_PROXY_FLEET = (
    "sites:\n"
    "  - name: site-p\n    syncMode: Pull\n    reportSecrets: None\n"
    "  - name: site-q\n    syncMode: Pull\n"
)


@pytest.fixture(scope="module")
def no_proxy_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    with sandbox_on_fleet(tmp_path_factory.mktemp("no-proxy"), NO_PROXY_FLEET) as server:
        yield server


def created(create: Callable[[], Any]) -> None:
    """Create, or find it already there (the sandbox is the module's)."""
    try:
        create()
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture
def karmada_without_proxy(
    no_proxy_sandbox: SandboxServer, settings: Any
) -> Iterator[Callable[[WorkflowRun, str], None]]:
    """Karmada is the sandbox with that fleet; ``ran_at(run, site)`` moves the run's inference
    step to ``site`` and really runs its step workflow there (simulated), so the binding's
    member status names the step's pod as Argo would."""
    settings.KARMADA_KUBECONFIG = str(no_proxy_sandbox.kubeconfig)
    SiteFactory(name="site-q", sync_mode=SyncMode.PULL)
    client.reset()
    api = no_proxy_sandbox.api_client()
    custom = k8s.CustomObjectsApi(api)
    ns = settings.KARMADA_NAMESPACE
    created(lambda: k8s.CoreV1Api(api).create_namespace({"metadata": {"name": ns}}))

    def ran_at(run: WorkflowRun, site: str) -> None:
        name = f"{run.name}-inference-1"
        UnitRun.objects.filter(run=run, name="inference").update(site=site, workflow_name=name)
        policy = site_policy(site)
        created(
            lambda: custom.create_namespaced_custom_object(*PP, ns, "propagationpolicies", policy)
        )
        body = workflow(name, [leaf("main")], labels={SITE_LABEL: site})
        custom.create_namespaced_custom_object(*WF, ns, "workflows", body)

        def done() -> bool:
            status = logs._member_status(name) or {}
            return status.get("phase") == "Succeeded"

        no_proxy_sandbox.wait_for(done, what=f"{name} Succeeded at {site}")

    try:
        yield ran_at
    finally:
        no_proxy_sandbox.clear_faults()
        client.reset()


def test_a_site_without_an_impersonator_secret_says_where_to_read_the_log(
    run: WorkflowRun, client_for: Any, scientist: User, karmada_without_proxy: RanAt
) -> None:
    karmada_without_proxy(run, "site-p")
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "Logs not available here: site-p is a pull-mode site" in body
    assert "impersonator secret" in body and "--report-secrets" in body
    wf = f"{run.name}-inference-1"
    assert f"kubectl logs -n portal {wf} -c main" in body
    assert "the impersonatorSecretRef of cluster site-p is nil" in body  # Karmada's own words


def test_a_pull_mode_site_with_the_agents_default_is_read_through_the_proxy(
    run: WorkflowRun,
    client_for: Any,
    scientist: User,
    karmada_without_proxy: RanAt,
    no_proxy_sandbox: SandboxServer,
) -> None:
    karmada_without_proxy(run, "site-q")
    url = reverse("ui-unit-logs", args=[run.pk, "inference"])
    body = client_for(scientist).get(url, **HX).content.decode()
    # The proxy reached the member's pod (a simulated pod prints nothing; a pod the member
    # did not have would be "did not give the pod's log").
    assert "The log is empty." in body and "Logs not available" not in body
    no_proxy_sandbox.fault("site-unreachable", site="site-q")
    body = client_for(scientist).get(url, **HX).content.decode()
    assert "site-q is a pull-mode site and Karmada cannot reach its API endpoint" in body
    assert "kubectl logs" in body


def test_the_api_logs_say_why_when_not_available(
    run: WorkflowRun,
    api_client_for: Any,
    scientist: User,
    karmada_without_proxy: RanAt,
) -> None:
    karmada_without_proxy(run, "site-p")
    answer = api_client_for(scientist).get(f"/api/v1/runs/{run.pk}/units/inference/logs/")
    assert answer.status_code == 404
    assert "site-p is a pull-mode site" in answer.json()["detail"]
    assert "kubectl logs" in answer.json()["detail"]
