"""The submit page's preview of a big fan-out draws one node for the loop, as the run page
does, so a 200-item fan-out is a DAG a screen tall, not a node per item."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def fan_out(items: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "tiles-"},
            "spec": {
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "list", "template": "work"},
                                {
                                    "name": "tile",
                                    "template": "work",
                                    "depends": "list",
                                    "withItems": list(range(items)),
                                },
                                {"name": "merge", "template": "work", "depends": "tile"},
                            ]
                        },
                    },
                    {"name": "work", "container": {"image": "busybox", "command": ["true"]}},
                ],
            },
        }
    )


def svg_size(body: str) -> tuple[int, int]:
    found = re.search(r'<svg class="dag[^"]*"[^>]* width="(\d+)" height="(\d+)"', body)
    assert found, body[:500]
    return int(found.group(1)), int(found.group(2))


def test_the_preview_of_a_200_item_fan_out_is_one_group_node_as_on_the_run_page(
    client_for: Any, scientist: User
) -> None:
    call_command("load_demo", verbosity=0)
    page = client_for(User.objects.get(username="scientist"))
    body = page.post(
        "/submit/preview/", {"manifest": fan_out(200), "project": "eo-demo"}, **HX
    ).content.decode()
    assert "Placement preview" in body, body[:800]
    assert 'data-items="200"' in body  # the loop's node says how many items it stands for
    nodes = re.findall(r'data-unit="([^"]+)"', body[body.index("<svg") : body.index("</svg>")])
    assert len(nodes) == 3, nodes  # list, the tile group, merge
    width, height = svg_size(body)
    assert width < 1500 and height < 1500, (width, height)
