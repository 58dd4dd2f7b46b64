"""Datasets and replicas from a STAC catalogue: a static catalogue (``catalog.json``, a
collection file) or a STAC API (its landing page), read with pystac.

Each Collection is a dataset (its id the dataset's name); the assets of its items, with their
``alternate`` hrefs, are its replicas. A replica's site is, in this order: the asset's
``portal:site``, the ``alternate`` key when a site has that name, or the ``--site-from-href``
rule. Fields the catalogue does not carry are left as they are on an existing dataset, so an
import never undoes what an operator set elsewhere. All or nothing: one transaction.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from sites import services
from sites.choices import ReplicaState
from sites.models import Dataset, Project, Site

MAX_PAGES = 1000  # of a STAC API's item pages per collection: a loop of next links ends


class CatalogueInvalid(Exception):
    """The catalogue cannot be read, or a rule cannot be understood."""


@dataclass
class Change:
    dataset: str
    action: str  # created, updated, unchanged
    details: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.action} {self.dataset}" + (
            f": {'; '.join(self.details)}" if self.details else ""
        )


@dataclass
class ImportReport:
    dry_run: bool
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[Change]:
        return [c for c in self.changes if c.action != "unchanged"]


def site_rule(rule: str | None) -> Callable[[str], str | None]:
    """``--site-from-href``: a regular expression with a group named ``site``
    (``^s3://(?P<site>site-[a-z])-archive/``), or ``PREFIX=SITE`` pairs separated by commas
    (``s3://site-a-archive/=site-a,https://b.example.org/=site-b``)."""
    if not rule:
        return lambda href: None
    if "(?P<site>" in rule:
        try:
            pattern = re.compile(rule)
        except re.error as exc:
            raise CatalogueInvalid(f"--site-from-href: {exc}") from None

        def by_pattern(href: str) -> str | None:
            m = pattern.search(href)
            return m.group("site") if m else None

        return by_pattern
    pairs = []
    for part in rule.split(","):
        prefix, sep, site = part.rpartition("=")
        if not sep or not prefix or not site:
            raise CatalogueInvalid(
                f"--site-from-href: {part!r} is neither PREFIX=SITE "
                "nor a pattern with (?P<site>...)"
            )
        pairs.append((prefix, site))

    def by_prefix(href: str) -> str | None:
        return next((site for prefix, site in pairs if href.startswith(prefix)), None)

    return by_prefix


def _read(href: str, headers: dict[str, str]) -> dict[str, Any]:
    import pystac  # on use: importing pystac costs about half a second

    try:
        data = pystac.stac_io.DefaultStacIO(headers=headers).read_json(href)
    except Exception as exc:  # noqa: BLE001 - any failure to read is the catalogue's
        raise CatalogueInvalid(f"cannot read {href}: {exc}") from None
    if not isinstance(data, dict):
        raise CatalogueInvalid(f"{href}: not a JSON object")
    return data


def _resolve(base: str, href: str) -> str:
    if urllib.parse.urlparse(href).scheme or Path(href).is_absolute():
        return href
    if urllib.parse.urlparse(base).scheme in ("http", "https"):
        return urllib.parse.urljoin(base, href)
    return str((Path(base).parent / href).resolve())


def _links(doc: dict[str, Any], base: str, rel: str) -> list[str]:
    return [
        _resolve(base, str(link["href"]))
        for link in doc.get("links") or []
        if isinstance(link, dict)
        and link.get("rel") == rel
        and link.get("href")
        and str(link.get("method", "GET")).upper() == "GET"
    ]


def _api_items(url: str, headers: dict[str, str]) -> Iterator[dict[str, Any]]:
    seen = set()
    for _ in range(MAX_PAGES):
        if url in seen:
            return
        seen.add(url)
        page = _read(url, headers)
        yield from (f for f in page.get("features") or [] if isinstance(f, dict))
        nxt = _links(page, url, "next")
        if not nxt:
            return
        url = nxt[0]


def _collections(
    source: str, headers: dict[str, str]
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each collection under ``source`` with its items (raw dicts, checked by pystac)."""
    import pystac

    root = _read(source, headers)
    pending: list[tuple[str, dict[str, Any]]] = [(source, root)]
    seen: set[str] = set()
    while pending:
        href, doc = pending.pop(0)
        if href in seen:
            continue
        seen.add(href)
        if doc.get("type") == "Collection":
            items = [_read(h, headers) for h in _links(doc, href, "item")]
            for api in _links(doc, href, "items"):
                items += list(_api_items(api, headers))
            try:
                pystac.Collection.from_dict(doc, migrate=False)
                for i in items:
                    pystac.Item.from_dict(i, migrate=False)
            except Exception as exc:  # noqa: BLE001 - pystac's own complaint, shown as is
                raise CatalogueInvalid(f"{href}: not a STAC collection: {exc}") from None
            yield doc, items
            continue
        for child in _links(doc, href, "child"):
            pending.append((child, _read(child, headers)))
        for data in _links(doc, href, "data"):  # a STAC API's /collections
            listing = _read(data, headers)
            for c in listing.get("collections") or []:
                if isinstance(c, dict):
                    self_links = _links(c, data, "self")
                    pending.append((self_links[0] if self_links else f"{data}#{c.get('id')}", c))
        if doc is root and doc.get("type") not in ("Catalog", "Collection"):
            raise CatalogueInvalid(f"{source}: not a STAC catalogue, collection or API")


@dataclass(frozen=True)
class Wanted:
    fields: dict[str, Any]
    replicas: dict[str, tuple[str, int]]  # site -> (uri, bytes)


def _replicas(
    items: list[dict[str, Any]],
    sites: dict[str, Site],
    rule: Callable[[str], str | None],
    report: ImportReport,
    dataset: str,
) -> dict[str, tuple[str, int]]:
    found: dict[str, tuple[str, int]] = {}
    for item in items:
        for key, asset in (item.get("assets") or {}).items():
            if not isinstance(asset, dict) or not asset.get("href"):
                continue
            roles = asset.get("roles") or ["data"]
            if "data" not in roles:
                continue
            copies = [("", asset)] + [
                (str(k), a)
                for k, a in (asset.get("alternate") or {}).items()
                if isinstance(a, dict) and a.get("href")
            ]
            for alt_key, copy in copies:
                href = str(copy["href"])
                site = copy.get("portal:site") or (alt_key if alt_key in sites else None)
                site = site or rule(href)
                if site is None:
                    report.warnings.append(f"{dataset}: no site for {href} (asset {key})")
                    continue
                if site not in sites:
                    report.warnings.append(f"{dataset}: unknown site {site!r} for {href}")
                    continue
                size = copy.get("portal:bytes", copy.get("file:size", asset.get("portal:bytes")))
                size = int(size) if isinstance(size, int) and size >= 0 else 0
                if site in found and found[site][0] != href:
                    report.warnings.append(
                        f"{dataset}: {href} ignored, {site} holds {found[site][0]} already"
                    )
                    continue
                found[site] = (href, size)
    return found


def _wanted(
    collection: dict[str, Any],
    items: list[dict[str, Any]],
    sites: dict[str, Site],
    rule: Callable[[str], str | None],
    report: ImportReport,
) -> Wanted:
    name = str(collection["id"])
    props = {**(items[0].get("properties") or {} if items else {}), **collection}
    fields: dict[str, Any] = {}
    if isinstance(props.get("portal:residency"), list):
        fields["residency"] = [str(r) for r in props["portal:residency"]]
    for key, attr in (("portal:format", "format"), ("portal:uri_prefix", "uri_prefix")):
        if isinstance(props.get(key), str):
            fields[attr] = props[key]
    if isinstance(props.get("portal:bytes"), int) and props["portal:bytes"] >= 0:
        fields["bytes"] = props["portal:bytes"]
    if "portal:project" in props:
        fields["project"] = props["portal:project"] or None
    return Wanted(fields, _replicas(items, sites, rule, report, name))


def _diff(dataset: Dataset | None, wanted: Wanted) -> list[str]:
    details = []
    for attr, value in wanted.fields.items():
        current = getattr(dataset, attr, None) if dataset else None
        if attr == "project":
            current = dataset.project.name if dataset and dataset.project is not None else None
        if dataset is None or current != value:
            details.append(f"{attr}: {current!r} -> {value!r}" if dataset else f"{attr}: {value!r}")
    if wanted.replicas:
        current_replicas = (
            {r.site.name: (r.uri, r.bytes) for r in dataset.replicas.select_related("site")}
            if dataset
            else {}
        )
        if current_replicas != wanted.replicas:
            shown = ", ".join(f"{s}: {u}" for s, (u, _) in sorted(wanted.replicas.items()))
            details.append(f"replicas: {shown}")
    return details


def catalogue_import(
    *,
    source: str,
    collections: list[str] | None = None,
    site_from_href: str | None = None,
    dry_run: bool = False,
    user: Any = None,
    headers: dict[str, str] | None = None,
) -> ImportReport:
    """Create or update a dataset per collection of ``source`` (a path or a URL); with
    ``dry_run`` the report says what would change and nothing is written. ``headers`` go
    with every HTTP request (a STAC API's ``Authorization``)."""
    rule = site_rule(site_from_href)
    report = ImportReport(dry_run=dry_run)
    sites = {s.name: s for s in Site.objects.all()}
    found = list(_collections(source, headers or {}))
    if collections:
        missing = set(collections) - {str(c.get("id")) for c, _ in found}
        if missing:
            raise CatalogueInvalid(f"no collection {', '.join(sorted(missing))} in {source}")
        found = [(c, i) for c, i in found if str(c.get("id")) in collections]
    with transaction.atomic():
        for collection, items in found:
            name = str(collection["id"])
            wanted = _wanted(collection, items, sites, rule, report)
            project_name = wanted.fields.get("project")
            project = None
            if project_name:
                project = Project.objects.filter(name=project_name).first()
                if project is None:
                    raise CatalogueInvalid(f"{name}: unknown project {project_name!r}")
            dataset = Dataset.objects.filter(name=name).select_related("project").first()
            details = _diff(dataset, wanted)
            action = "created" if dataset is None else "updated" if details else "unchanged"
            report.changes.append(Change(name, action, details))
            if dry_run or action == "unchanged":
                continue
            replicas = [
                services.ReplicaInput(site=sites[s], uri=u, bytes=b, state=ReplicaState.READY)
                for s, (u, b) in sorted(wanted.replicas.items())
            ]
            values = (
                {**wanted.fields, "project": project}
                if "project" in wanted.fields
                else dict(wanted.fields)
            )
            if dataset is None:
                services.dataset_create(user=user, name=name, replicas=replicas, **values)
            else:
                if replicas:
                    values["replicas"] = replicas
                services.dataset_update(dataset=dataset, user=user, **values)
    return report
