"""The webhook's token and its answers to bad input."""

from __future__ import annotations

import json

import pytest

from tests.portal.admission.helpers import (
    TOKEN,
    URL,
    answer,
    direct_workflow,
    post,
    review,
    step_workflow,
)


def test_it_refuses_a_caller_without_token(client, demo_run):
    response = post(client, review(step_workflow(demo_run)), auth=False)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_refuses_a_wrong_token_in_header_or_path(client, demo_run):
    body = review(step_workflow(demo_run))
    bad_header = client.post(
        URL,
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": "Bearer x"},
    )
    assert bad_header.status_code == 403
    bad_path = post(client, body, path=f"{URL}wrong-token/", auth=False)
    assert bad_path.status_code == 403
    assert demo_run.units.get(name="preprocess").site == ""


def test_it_accepts_the_token_in_the_path_as_karmada_sends_it(client, demo_run):
    _, patch = answer(
        post(client, review(step_workflow(demo_run)), path=f"{URL}{TOKEN}/", auth=False)
    )
    assert patch is not None


def test_without_a_configured_token_it_is_open_only_in_debug(client, demo_run, settings):
    settings.PORTAL_WEBHOOK_TOKEN = ""
    settings.DEBUG = False
    assert post(client, review(direct_workflow()), auth=False).status_code == 403
    settings.DEBUG = True
    assert post(client, review(direct_workflow()), auth=False).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"kind": "Pod", "apiVersion": "v1"}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}',
        b'{"kind": "AdmissionReview", "apiVersion": "v9", "request": {"uid": "u"}}',
        b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": 7}}',
    ],
)
def test_it_answers_400_to_a_body_that_is_not_an_admission_review(client, db, body):
    response = post(client, body)
    assert response.status_code == 400
    assert "AdmissionReview" in response.json()["error"]


def test_it_refuses_an_oversized_body(client, db):
    from portal.webhook import MAX_BODY_BYTES

    response = post(client, b" " * (MAX_BODY_BYTES + 1))
    assert response.status_code == 413


def test_it_only_accepts_post(client, db):
    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 405
