"""The dashboard's view tests' set-up: three demo sites, a scientist's client and a run."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import WorkflowRun
from sites.models import Project, Site
from tests.factories import (
    SiteFactory,
)
from tests.portal.helpers import make_run

HX = {"HTTP_HX_REQUEST": "true"}
BROKEN_YAML = (
    "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: main\n"
    "   templates: []\n"
)


@pytest.fixture
def demo_sites(db) -> dict[str, Site]:
    return {
        "site-a": SiteFactory(name="site-a", cpu_allocatable=4000, cpu_allocated=3500),
        "site-b": SiteFactory(name="site-b"),
        "site-c": SiteFactory(name="site-c", gpu_allocatable=8, gpu_allocated=2),
    }


@pytest.fixture
def sci(client_for, scientist: User) -> Client:
    return client_for(scientist)


@pytest.fixture
def run(scientist: User, project: Project, demo_sites: dict[str, Site]) -> WorkflowRun:
    return make_run(scientist, project=project)
