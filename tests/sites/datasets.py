"""What the dataset API tests share: the URLs, the readers of an answer and a new dataset's
body."""

from __future__ import annotations

from typing import Any

from sites.models import Dataset

LIST = "/api/v1/datasets/"


def detail(dataset: Dataset) -> str:
    return f"/api/v1/datasets/{dataset.pk}/"


def paths(response) -> list[str]:
    return [error["path"] for error in response.json()["errors"]]


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [d["name"] for d in response.json()["results"]]


def new_dataset(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "sentinel-2",
        "project": "eo",
        "uri_prefix": "s3://eo/sentinel-2/",
        "bytes": 1000,
        "format": "zarr",
        "residency": ["eu-west", "eu-north"],
        "replicas": [
            {"site": "site-op", "uri": "s3://op/s2/", "bytes": 1000},
            {"site": "site-other", "uri": "s3://other/s2/", "bytes": 1000, "state": "Copying"},
        ],
    }
    body.update(overrides)
    return body
