"""The datasets the dataset API tests see, one per kind of visibility."""

from __future__ import annotations

import pytest

from sites.models import Dataset, Project, Site
from tests.factories import DatasetFactory, DatasetReplicaFactory, ProjectFactory


@pytest.fixture
def project_dataset(project: Project, other_site: Site) -> Dataset:
    """A dataset of the scientist's project, with a replica at a site nobody here operates."""
    dataset = DatasetFactory(name="project-data", project=project, residency=["eu-west"])
    DatasetReplicaFactory(dataset=dataset, site=other_site, uri="s3://other/p/", bytes=5)
    return dataset


@pytest.fixture
def foreign_dataset(db) -> Dataset:
    """A dataset of a project none of the personas belongs to, stored nowhere they operate."""
    return DatasetFactory(name="foreign-data", project=ProjectFactory(name="other-team"))


@pytest.fixture
def public_dataset(db) -> Dataset:
    return DatasetFactory(name="public-data", project=None)


@pytest.fixture
def hosted_dataset(operated_site: Site) -> Dataset:
    """Another team's dataset with a replica at the operator's site."""
    dataset = DatasetFactory(name="hosted-data", project=ProjectFactory(name="hosts"))
    DatasetReplicaFactory(dataset=dataset, site=operated_site)
    return dataset


@pytest.fixture
def all_datasets(project_dataset, foreign_dataset, public_dataset, hosted_dataset) -> None:
    pass
