"""``manage.py datasets import-stac <catalog.json | STAC API URL>``: datasets and replicas
from a STAC catalogue (sites/stac_import.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sites.stac_import import CatalogueInvalid, catalogue_import


class Command(BaseCommand):
    help = "Datasets: import-stac reads datasets and their replicas from a STAC catalogue."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        stac = sub.add_parser(
            "import-stac",
            help="create or update datasets and replicas from a STAC catalogue or API",
        )
        stac.add_argument("source", help="a catalog.json or collection file, or a STAC API URL")
        stac.add_argument(
            "--collection",
            action="append",
            dest="collections",
            metavar="C",
            help="only this collection (repeatable)",
        )
        stac.add_argument(
            "--site-from-href",
            metavar="RULE",
            help="a pattern with (?P<site>...), or PREFIX=SITE pairs separated by commas: "
            "the site of an href that names none (portal:site, an alternate key)",
        )
        stac.add_argument(
            "--header",
            action="append",
            dest="headers",
            metavar="'NAME: VALUE'",
            help="an HTTP header for every request (e.g. a STAC API's Authorization)",
        )
        stac.add_argument(
            "--dry-run", action="store_true", help="say what would change, write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        headers = {}
        for header in options.get("headers") or []:
            name, sep, value = header.partition(":")
            if not sep or not name.strip():
                raise CommandError(f"--header {header!r}: not NAME: VALUE")
            headers[name.strip()] = value.strip()
        try:
            report = catalogue_import(
                source=options["source"],
                collections=options.get("collections"),
                site_from_href=options.get("site_from_href"),
                dry_run=options["dry_run"],
                headers=headers,
            )
        except CatalogueInvalid as exc:
            raise CommandError(str(exc)) from None
        for warning in report.warnings:
            self.stderr.write(f"warning: {warning}")
        for change in report.changes:
            self.stdout.write(
                ("would be " if report.dry_run and change.action != "unchanged" else "")
                + str(change)
            )
        verb = "would change" if report.dry_run else "changed"
        self.stdout.write(f"{len(report.changes)} datasets read, {len(report.changed)} {verb}")
