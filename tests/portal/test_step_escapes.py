"""A submission whose step would mount a host folder is refused at the door: a `subPath`
that is absolute or goes up, a claim or volume name that is no DNS name. A 400 naming each
field, as kube-apiserver would refuse the pod or the claim at the site; nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from portal.models import WorkflowRun

MOUNT = "spec.templates[0].container.volumeMounts"


def escaping() -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "escape-"},
        "spec": {
            "entrypoint": "main",
            "volumeClaimTemplates": [{"metadata": {"name": "../../../var"}, "spec": {}}],
            "volumes": [{"name": "host", "persistentVolumeClaim": {"claimName": "../../etc"}}],
            "templates": [
                {
                    "name": "main",
                    "container": {
                        "image": "alpine:3.23",
                        "command": ["cat", "/w/portal.sqlite3"],
                        "volumeMounts": [
                            {"name": "host", "mountPath": "/w", "subPath": "../../../var"},
                            {"name": "host", "mountPath": "/e", "subPath": "/etc"},
                            {
                                "name": "host",
                                "mountPath": "/p",
                                "subPath": "{{inputs.parameters.p}}",
                            },
                        ],
                    },
                }
            ],
        },
    }


@pytest.fixture
def sci(db: Any, django_user_model: Any, api_key_for: Callable[[Any], str]) -> APIClient:
    """The demo's scientist, an ordinary member of the eo-demo project, with an API key."""
    call_command("load_demo", verbosity=0)
    client = APIClient(raise_request_exception=False)
    user = django_user_model.objects.get(username="scientist")
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}")
    return client


@pytest.mark.parametrize("endpoint", ["/api/v1/runs/preview/", "/api/v1/runs/"])
def test_a_step_that_would_mount_a_host_folder_is_a_400_naming_each_field(
    sci: APIClient, endpoint: str
) -> None:
    response = sci.post(
        f"{endpoint}?project=eo-demo",
        data=yaml.safe_dump(escaping()),
        content_type="application/yaml",
    )
    assert response.status_code == 400, response.content
    errors = {e["path"]: e["message"] for e in response.json()["errors"]}
    assert errors[f"{MOUNT}[0].subPath"] == "\"../../../var\": must not contain '..'"
    assert errors[f"{MOUNT}[1].subPath"] == '"/etc": must be a relative path'
    assert errors["spec.volumeClaimTemplates[0].metadata.name"].startswith(
        '"../../../var": a lowercase RFC 1123 subdomain must consist of'
    )
    assert errors["spec.volumes[0].persistentVolumeClaim.claimName"].startswith('"../../etc": ')
    # A variable is checked at the site, once Argo has substituted it.
    assert f"{MOUNT}[2].subPath" not in errors
    assert not WorkflowRun.objects.exists()


def test_a_catalogue_template_that_would_mount_a_host_folder_is_a_400(sci: APIClient) -> None:
    doc = escaping()
    doc["kind"] = "WorkflowTemplate"
    doc["metadata"] = {"name": "escape"}
    response = sci.post(
        "/api/v1/workflow-templates/?project=eo-demo",
        data=yaml.safe_dump(doc),
        content_type="application/yaml",
    )
    assert response.status_code == 400, response.content
    paths = {e["path"] for e in response.json()["errors"]}
    assert f"{MOUNT}[0].subPath" in paths
    assert "spec.volumeClaimTemplates[0].metadata.name" in paths


def test_sub_paths_inside_the_volume_and_dns_names_are_accepted(sci: APIClient) -> None:
    doc = escaping()
    doc["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "work"
    doc["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "shared.data-1"
    mounts = doc["spec"]["templates"][0]["container"]["volumeMounts"]
    mounts[0]["subPath"] = "a/b..c/./d"
    mounts[1]["subPath"] = "etc"
    response = sci.post(
        "/api/v1/runs/preview/?project=eo-demo",
        data=yaml.safe_dump(doc),
        content_type="application/yaml",
    )
    assert response.status_code == 200, response.content
