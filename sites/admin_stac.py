"""The admin's STAC import: upload a catalogue (one JSON document, or a zip of a static
catalogue with ``catalog.json`` at its top), see what would change, then import it. The same
import as ``manage.py datasets import-stac`` (sites/stac_import.py); fleet staff only."""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from sites.permissions import is_fleet_staff
from sites.stac_import import CatalogueInvalid, ImportReport, catalogue_import

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_FILES = 10_000


class StacImportForm(forms.Form):
    catalogue = forms.FileField(
        help_text="catalog.json (or a collection file) with absolute links, or a .zip of a "
        "static catalogue with catalog.json at its top"
    )
    collection = forms.CharField(required=False, help_text="only this collection")
    site_from_href = forms.CharField(
        required=False,
        help_text="a pattern with (?P<site>...), or PREFIX=SITE pairs separated by commas",
    )
    dry_run = forms.BooleanField(required=False, initial=True, label="Dry run (write nothing)")

    def clean_catalogue(self) -> Any:
        upload = self.cleaned_data["catalogue"]
        if upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"at most {MAX_UPLOAD_BYTES // 2**20} MB")
        return upload


def _unpack(upload: Any, folder: Path) -> Path:
    """The uploaded catalogue on disk; a zip's members stay inside ``folder``."""
    name = Path(upload.name or "catalog.json").name
    if not name.lower().endswith(".zip"):
        target = folder / "catalog.json"
        target.write_bytes(upload.read())
        return target
    try:
        with zipfile.ZipFile(upload) as archive:
            members = archive.infolist()
            if (
                len(members) > MAX_FILES
                or sum(m.file_size for m in members) > 10 * MAX_UPLOAD_BYTES
            ):
                raise CatalogueInvalid("the zip holds too much")
            for member in members:
                dest = (folder / member.filename).resolve()
                if not dest.is_relative_to(folder.resolve()):
                    raise CatalogueInvalid(f"{member.filename}: outside the catalogue")
            archive.extractall(folder)
    except zipfile.BadZipFile as exc:
        raise CatalogueInvalid(f"not a zip file: {exc}") from None
    found = sorted(folder.rglob("catalog.json"), key=lambda p: len(p.parts))
    if not found:
        raise CatalogueInvalid("the zip holds no catalog.json")
    return found[0]


def import_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    if not is_fleet_staff(request.user):
        raise PermissionDenied
    report: ImportReport | None = None
    error = ""
    form = StacImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        with tempfile.TemporaryDirectory() as tmp:
            try:
                source = _unpack(data["catalogue"], Path(tmp))
                report = catalogue_import(
                    source=str(source),
                    collections=[data["collection"]] if data["collection"] else None,
                    site_from_href=data["site_from_href"] or None,
                    dry_run=data["dry_run"],
                    user=request.user,
                )
            except CatalogueInvalid as exc:
                error = str(exc)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": "Import datasets from a STAC catalogue",
        "form": form,
        "report": report,
        "error": error,
    }
    return TemplateResponse(request, "admin/sites/dataset/import_stac.html", context)
