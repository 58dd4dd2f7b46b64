"""Admin URLs, and reading a changelist or running one of its actions."""

from __future__ import annotations

from django.test import Client

SITES = "/admin/sites/site/"
RULES = "/admin/placement/placementrule/"


def changelist_names(response) -> list[str]:
    assert response.status_code == 200
    return [str(obj) for obj in response.context["cl"].result_list]


def run_action(client: Client, url: str, action: str, *objects) -> object:
    return client.post(
        url, {"action": action, "_selected_action": [str(o.pk) for o in objects]}, follow=True
    )
