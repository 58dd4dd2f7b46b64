"""AdmissionReviews as karmada-apiserver sends them, and the workflows they carry."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from django.test import Client

from portal.admission import queue as decision_queue
from portal.controller.step_workflow import step_workflow_for
from portal.models import WorkflowRun

EO_PIPELINE = Path(__file__).resolve().parents[3] / "examples" / "eo-pipeline.yaml"
TOKEN = "webhook-test-token"
URL = "/webhooks/placement/"
D = "portal.multisite.io"
GB = 10**9


def review(
    obj: dict[str, Any],
    *,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    namespace: str = "portal",
    operation: str = "CREATE",
    dry_run: bool = False,
) -> dict[str, Any]:
    """An AdmissionReview the way karmada-apiserver (kube-apiserver) sends one on CREATE."""
    gvk = {"group": "argoproj.io", "version": "v1alpha1", "kind": "Workflow"}
    gvr = {"group": "argoproj.io", "version": "v1alpha1", "resource": "workflows"}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": "system:admin",
                "groups": ["system:masters", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def post(
    client: Client, body: Any, *, path: str | None = None, auth: bool = True, flush: bool = True
):
    """POST to the webhook; ``flush``: then write the queued decisions as the watcher would."""
    headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    response = client.post(path or URL, data=data, content_type="application/json", headers=headers)
    if flush:
        decision_queue.decisions_flush()
    return response


def answer(response) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["kind"] == "AdmissionReview"
    assert body["apiVersion"] == "admission.k8s.io/v1"
    resp = body["response"]
    assert resp["allowed"] is True
    if "patch" not in resp:
        assert "patchType" not in resp
        return resp, None
    assert resp["patchType"] == "JSONPatch"
    return resp, json.loads(base64.b64decode(resp["patch"]))


def patched_labels(patch: list[dict[str, Any]]) -> dict[str, Any]:
    return {op["path"]: op["value"] for op in patch}


def step_workflow(run: WorkflowRun, unit: str = "preprocess", **extra_labels: str):
    u = run.units.get(name=unit)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": f"{run.name}-{u.slug}-{u.attempt}",
            "namespace": "portal",
            "labels": {
                f"{D}/managed": "true",
                f"{D}/run": str(run.pk),
                f"{D}/unit": u.slug,
                f"{D}/attempt": str(u.attempt),
                f"{D}/placement": "runtime",
                **extra_labels,
            },
        },
        "spec": {"entrypoint": u.template, "templates": [{"name": u.template}]},
    }


def direct_workflow(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "hello-x7k2p", "generateName": "hello-", **metadata},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {
                    "name": "main",
                    "steps": [[{"name": "say", "template": "say"}]],
                },
                {
                    "name": "say",
                    "container": {
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    },
                },
            ],
        },
    }


def real_step_workflow(run: WorkflowRun, unit: str = "preprocess") -> dict[str, Any]:
    """The step workflow exactly as the worker would create it (with its placement context)."""
    units = list(run.units.order_by("position", "id"))
    target = next(u for u in units if u.name == unit)
    return step_workflow_for(run, target, units)


def context_of(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(obj["metadata"]["annotations"][f"{D}/placement-context"])
