"""Datasets and replicas as STAC documents, written with pystac.

Each dataset is a Collection and has one Item of the same id whose ``data`` asset is the
dataset: its ``href`` the first replica (by site name), its ``alternate`` assets one per site
holding a replica (alternate-assets extension), each with the storage extension's
``storage:platform`` and ``storage:region`` and the portal's ``portal:site`` and
``portal:bytes``. Residency, project, format and URI prefix are properties of the collection
and of the item (``portal:residency``, ...), so an import reads back what the face writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sites.models import Dataset, DatasetReplica

if TYPE_CHECKING:
    import pystac

STORAGE = "https://stac-extensions.github.io/storage/v1.0.0/schema.json"
ALTERNATE = "https://stac-extensions.github.io/alternate-assets/v1.2.0/schema.json"
PLATFORMS = {"OTHER", "AWS", "GCP", "AZURE", "IBM", "ALIBABA", "ORACLE"}
WORLD = [-180.0, -90.0, 180.0, 90.0]
LICENSE = "other"


def platform(provider: str) -> str:
    """``storage:platform`` takes one of a few cloud names; any other provider is OTHER."""
    upper = (provider or "").upper()
    return upper if upper in PLATFORMS else "OTHER"


def _since(dataset: Dataset) -> datetime:
    return dataset.created_at or datetime(1970, 1, 1, tzinfo=UTC)


def dataset_fields(dataset: Dataset) -> dict[str, Any]:
    return {
        "portal:residency": list(dataset.residency or []),
        "portal:project": dataset.project.name if dataset.project is not None else None,
        "portal:format": dataset.format,
        "portal:uri_prefix": dataset.uri_prefix,
        "portal:bytes": dataset.bytes,
    }


def _replica_fields(replica: DatasetReplica) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "storage:platform": platform(replica.site.provider),
        "portal:site": replica.site.name,
        "portal:bytes": replica.bytes,
        "portal:state": replica.state,
    }
    if replica.site.region:
        fields["storage:region"] = replica.site.region
    return fields


def collection(dataset: Dataset) -> pystac.Collection:
    import pystac  # on use: importing pystac costs a web process about half a second

    return pystac.Collection(
        id=dataset.name,
        description=f"Dataset {dataset.name}"
        + (f" ({dataset.format})" if dataset.format else "")
        + (f", resident in {', '.join(dataset.residency)}" if dataset.residency else ""),
        title=dataset.name,
        extent=pystac.Extent(
            pystac.SpatialExtent([WORLD]), pystac.TemporalExtent([[_since(dataset), None]])
        ),
        license=LICENSE,
        extra_fields=dataset_fields(dataset),
    )


def item(dataset: Dataset) -> pystac.Item:
    import pystac

    replicas = sorted(dataset.replicas.all(), key=lambda r: r.site.name)
    result = pystac.Item(
        id=dataset.name,
        geometry=None,
        bbox=None,
        datetime=_since(dataset),
        properties={k: v for k, v in dataset_fields(dataset).items() if v is not None},
        collection=dataset.name,
        stac_extensions=[STORAGE, ALTERNATE],
    )
    if replicas:
        first = replicas[0]
        alternates = {
            r.site.name: {
                "href": r.uri or dataset.uri_prefix,
                "title": f"replica at {r.site.name}",
                **_replica_fields(r),
            }
            for r in replicas
        }
        result.add_asset(
            "data",
            pystac.Asset(
                href=first.uri or dataset.uri_prefix,
                title=f"{dataset.name} ({len(replicas)} replicas)",
                roles=["data"],
                extra_fields={**_replica_fields(first), "alternate": alternates},
            ),
        )
    return result
