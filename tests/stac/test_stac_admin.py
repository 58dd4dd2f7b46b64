"""The admin's STAC import: the same import as the command, from an uploaded catalogue."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from sites.models import Dataset, DatasetReplica

CATALOGUE = Path(__file__).resolve().parents[2] / "examples" / "stac"
URL = "/admin/sites/dataset/import-stac/"


def _zip(extra: dict[str, str] | None = None) -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in CATALOGUE.rglob("*.json"):
            archive.write(path, f"stac/{path.relative_to(CATALOGUE)}")
        for name, text in (extra or {}).items():
            archive.writestr(name, text)
    return SimpleUploadedFile("demo.zip", buffer.getvalue(), content_type="application/zip")


@pytest.fixture
def admin_client(db: Any) -> Client:
    call_command("load_demo", verbosity=0)
    Dataset.objects.all().delete()
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    return client


def test_staff_upload_a_zipped_catalogue_dry_run_first(admin_client: Client) -> None:
    assert "Import from STAC" in admin_client.get("/admin/sites/dataset/").content.decode()
    dry = admin_client.post(URL, {"catalogue": _zip(), "dry_run": "on"})
    assert dry.status_code == 200
    assert "created sentinel2-l1c" in dry.content.decode()
    assert not Dataset.objects.exists()

    done = admin_client.post(URL, {"catalogue": _zip()})
    assert "Changed: 2 of 2 datasets" in done.content.decode()
    assert DatasetReplica.objects.filter(dataset__name="copernicus-dem-glo30").count() == 3
    again = admin_client.post(URL, {"catalogue": _zip()})
    assert "Changed: 0 of 2 datasets" in again.content.decode()


def test_a_zip_reaching_outside_its_folder_is_refused(admin_client: Client) -> None:
    response = admin_client.post(URL, {"catalogue": _zip({"../evil.json": "{}"})})
    assert "outside the catalogue" in response.content.decode()
    assert not Dataset.objects.exists()


def test_only_fleet_staff_may_import(admin_client: Client, operator: User) -> None:
    """A scoped site operator (staff in the operators group) manages their own sites'
    replicas, not the fleet's datasets."""
    client = Client()
    client.force_login(operator)
    assert client.post(URL, {"catalogue": _zip()}).status_code == 403
    assert not Dataset.objects.exists()
