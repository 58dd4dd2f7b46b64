"""The STAC face with the field's own client (pystac-client) over HTTP, every document
checked by pystac's validator (offline, tests/stac/validation.py), and ``manage.py datasets
import-stac`` of the demo's catalogue."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pystac
import pytest
import requests
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from pystac_client import Client

from portal.api_tokens import api_token_create
from sites.models import Dataset, DatasetReplica, Project
from tests.stac.validation import validate

CATALOGUE = Path(__file__).resolve().parents[2] / "examples" / "stac" / "catalog.json"
STORAGE = "https://stac-extensions.github.io/storage/v1.0.0/schema.json"


@pytest.fixture
def demo(transactional_db: Any) -> None:
    call_command("load_demo", verbosity=0)


@pytest.fixture
def key(demo: None) -> str:
    return api_token_create(user=User.objects.get(username="scientist"), replace=True)


@pytest.fixture
def stac_url(live_server: Any) -> str:
    return f"{live_server.url}/stac/"


@pytest.mark.filterwarnings("ignore:The following platforms cannot be automatically migrated")
def test_pystac_client_lists_collections_and_searches_the_replicas(stac_url: str, key: str) -> None:
    client = Client.open(stac_url, headers={"Authorization": f"Bearer {key}"})
    assert client.conforms_to("ITEM_SEARCH") and client.conforms_to("COLLECTIONS")
    ids = sorted(c.id for c in client.get_collections())
    assert ids == ["copernicus-dem-glo30", "sentinel2-l1c"]

    search = client.search(collections=["sentinel2-l1c", "copernicus-dem-glo30"], max_items=10)
    items = {i.id: i.to_dict(transform_hrefs=False) for i in search.items()}
    assert sorted(items) == ids
    # The demo dataset: its one replica, at site-a, with the storage extension's fields.
    s2 = items["sentinel2-l1c"]["assets"]["data"]
    assert {k: v["href"] for k, v in s2["alternate"].items()} == {
        "site-a": "s3://site-a-archive/sentinel2/l1c/"
    }
    assert s2["alternate"]["site-a"]["storage:region"] == "eu-west"
    assert items["sentinel2-l1c"]["properties"]["portal:residency"] == ["eu-west", "eu-central"]
    # The DEM: one alternate href per site, each with its site's region.
    dem = items["copernicus-dem-glo30"]["assets"]["data"]["alternate"]
    assert {k: (v["href"], v["storage:region"], v["storage:platform"]) for k, v in dem.items()} == {
        "site-a": ("s3://site-a-archive/copernicus-dem/glo30/", "eu-west", "OTHER"),
        "site-b": ("s3://site-b-cache/copernicus-dem/glo30/", "eu-west", "OTHER"),
        "site-c": ("s3://site-c-scratch/copernicus-dem/glo30/", "eu-central", "OTHER"),
    }
    # pystac names the extension by its newest version when it reads an item (its
    # migration keeps the v1 fields of a platform v2 has no scheme for, and warns); the
    # document as served names v1.0.0 (test_every_document_the_api_returns_validates).
    assert any("/storage/" in e for e in items["copernicus-dem-glo30"]["stac_extensions"])


def _get(url: str, key: str) -> dict[str, Any]:
    response = requests.get(url, headers={"Authorization": f"Token {key}"}, timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_every_document_the_api_returns_validates(stac_url: str, key: str) -> None:
    base = stac_url.rstrip("/")
    landing = _get(stac_url, key)
    assert "https://schemas.stacspec.org/v1.1.0/catalog-spec/json-schema/catalog.json" in validate(
        landing
    )
    collections = _get(f"{base}/collections", key)["collections"]
    documents = list(collections)
    for c in collections:
        documents.append(_get(f"{base}/collections/{c['id']}", key))
        documents += _get(f"{base}/collections/{c['id']}/items", key)["features"]
        documents.append(_get(f"{base}/collections/{c['id']}/items/{c['id']}", key))
    documents += _get(f"{base}/search", key)["features"]
    assert len(documents) == 10
    for doc in documents:
        schemas = validate(doc)
        if doc["type"] == "Feature":
            assert STORAGE in schemas


def test_search_pages_with_next_links_and_refuses_bad_parameters(stac_url: str, key: str) -> None:
    first = _get(f"{stac_url}search?limit=1", key)
    assert [f["id"] for f in first["features"]] == ["copernicus-dem-glo30"]
    (nxt,) = [link["href"] for link in first["links"] if link["rel"] == "next"]
    second = _get(nxt, key)
    assert [f["id"] for f in second["features"]] == ["sentinel2-l1c"]
    assert not [link for link in second["links"] if link["rel"] == "next"]
    for query, path in (
        ("limit=0", "limit"),
        ("bbox=1,2", "bbox"),
        ("datetime=yesterday", "datetime"),
    ):
        response = requests.get(
            f"{stac_url}search?{query}", headers={"Authorization": f"Token {key}"}, timeout=30
        )
        assert response.status_code == 400, query
        assert response.json()["errors"][0]["path"] == path


def test_an_outsider_sees_no_project_dataset_and_no_token_is_401(stac_url: str, demo: None) -> None:
    outsider = User.objects.create_user("outsider-stac")
    key = api_token_create(user=outsider)
    ids = [c["id"] for c in _get(f"{stac_url}collections", key)["collections"]]
    assert ids == ["copernicus-dem-glo30"]  # fleet-wide; sentinel2-l1c is eo-demo's
    response = requests.get(
        f"{stac_url}collections/sentinel2-l1c", headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 404
    assert requests.get(f"{stac_url}collections").status_code == 401
    wrong = requests.get(f"{stac_url}collections", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def _import(*args: str) -> str:
    out = io.StringIO()
    call_command("datasets", "import-stac", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_import_stac_into_an_empty_inventory_twice_changes_nothing_the_second_time(
    demo: None,
) -> None:
    Dataset.objects.all().delete()
    dry = _import(str(CATALOGUE), "--dry-run")
    assert "2 datasets read, 2 would change" in dry
    assert not Dataset.objects.exists()

    first = _import(str(CATALOGUE))
    assert "created sentinel2-l1c" in first and "2 datasets read, 2 changed" in first
    s2 = Dataset.objects.get(name="sentinel2-l1c")
    assert s2.residency == ["eu-west", "eu-central"]
    assert s2.project == Project.objects.get(name="eo-demo")
    assert sorted(
        DatasetReplica.objects.filter(dataset__name="copernicus-dem-glo30").values_list(
            "site__name", "uri"
        )
    ) == [
        ("site-a", "s3://site-a-archive/copernicus-dem/glo30/"),
        ("site-b", "s3://site-b-cache/copernicus-dem/glo30/"),
        ("site-c", "s3://site-c-scratch/copernicus-dem/glo30/"),
    ]
    before = sorted(DatasetReplica.objects.values_list("pk", "dataset__name", "site__name", "uri"))

    second = _import(str(CATALOGUE))
    assert "2 datasets read, 0 changed" in second
    assert "unchanged sentinel2-l1c" in second and "unchanged copernicus-dem-glo30" in second
    assert (
        sorted(DatasetReplica.objects.values_list("pk", "dataset__name", "site__name", "uri"))
        == before
    )


def test_import_stac_reports_an_update_and_takes_one_collection(demo: None) -> None:
    Dataset.objects.filter(name="sentinel2-l1c").update(residency=["eu-west"])
    out = _import(str(CATALOGUE), "--collection", "sentinel2-l1c")
    assert "updated sentinel2-l1c: residency: ['eu-west'] -> ['eu-west', 'eu-central']" in out
    assert "1 datasets read, 1 changed" in out
    assert Dataset.objects.get(name="sentinel2-l1c").residency == ["eu-west", "eu-central"]
    with pytest.raises(CommandError, match="no collection nope"):
        _import(str(CATALOGUE), "--collection", "nope")


def test_import_stac_finds_sites_from_hrefs_by_rule(demo: None, tmp_path: Path) -> None:
    """A catalogue kept elsewhere names no portal site: ``--site-from-href`` maps its hrefs."""
    shutil.copytree(CATALOGUE.parent, tmp_path / "stac")
    item_file = (
        tmp_path
        / "stac"
        / "copernicus-dem-glo30"
        / "copernicus-dem-glo30"
        / ("copernicus-dem-glo30.json")
    )
    item = json.loads(item_file.read_text())
    asset = item["assets"]["data"]
    asset.pop("portal:site")
    asset["alternate"] = {
        f"copy-{i}": {k: v for k, v in a.items() if k != "portal:site"}
        for i, a in enumerate(asset["alternate"].values())
    }
    item_file.write_text(json.dumps(item))
    Dataset.objects.all().delete()
    source = str(tmp_path / "stac" / "catalog.json")

    err = io.StringIO()
    call_command("datasets", "import-stac", source, stdout=io.StringIO(), stderr=err)
    assert (
        "copernicus-dem-glo30: no site for s3://site-b-cache/copernicus-dem/glo30/"
        in err.getvalue()
    )
    Dataset.objects.all().delete()

    _import(source, "--site-from-href", r"^s3://(?P<site>site-[a-z])-")
    assert sorted(
        DatasetReplica.objects.filter(dataset__name="copernicus-dem-glo30").values_list(
            "site__name", flat=True
        )
    ) == ["site-a", "site-b", "site-c"]
    with pytest.raises(CommandError, match="neither PREFIX=SITE"):
        _import(source, "--site-from-href", "no-equals-sign")


def test_import_stac_refuses_what_is_not_a_catalogue(demo: None, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "FeatureCollection", "features": []}))
    with pytest.raises(CommandError, match="not a STAC catalogue"):
        _import(str(bad))
    with pytest.raises(CommandError, match="cannot read"):
        _import(str(tmp_path / "missing.json"))
    count = Dataset.objects.count()
    broken = json.loads(CATALOGUE.read_text())
    assert pystac.Catalog.from_dict(broken).id == "demo-fleet"
    assert Dataset.objects.count() == count


def test_import_stac_reads_a_stac_api_and_what_the_face_serves_changes_nothing(
    stac_url: str, key: str
) -> None:
    """The face's own documents imported back: the API path (``data`` link, each
    collection's ``items``) and the round trip of every field."""
    out = _import(stac_url, "--header", f"Authorization: Bearer {key}")
    assert "unchanged sentinel2-l1c" in out and "unchanged copernicus-dem-glo30" in out
    assert "2 datasets read, 0 changed" in out
    with pytest.raises(CommandError, match="cannot read"):
        _import(stac_url)  # the collections need a token
    with pytest.raises(CommandError, match="not NAME: VALUE"):
        _import(stac_url, "--header", "Bearer")


def test_search_by_post_takes_a_json_body(stac_url: str, key: str) -> None:
    auth = {"Authorization": f"Bearer {key}"}
    found = requests.post(f"{stac_url}search", json={"ids": ["sentinel2-l1c"]}, headers=auth)
    assert [f["id"] for f in found.json()["features"]] == ["sentinel2-l1c"]
    bad = requests.post(f"{stac_url}search", data="ids: [", headers=auth)
    assert bad.status_code == 400
    assert requests.post(f"{stac_url}search", json=["x"], headers=auth).status_code == 400
