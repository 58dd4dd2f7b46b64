"""A STAC API 1.0.0 (core, collections, ogcapi-features, item-search) over the inventory:
the datasets a user may see (as ``/api/v1/datasets/`` shows them), written by
``sites.stac``. Datasets carry no footprint: each item has no geometry and a world extent,
so a spatial filter (``bbox``, ``intersects``) keeps every item."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from django.utils.dateparse import parse_datetime
from rest_framework.request import Request

from portal.faces import FaceView, Problem, RawBody, json_body, json_response, root_url
from sites import stac
from sites.models import Dataset
from sites.selectors import dataset_list_visible

PREFIX = "stac"
API = "https://api.stacspec.org/v1.0.0"
CONFORMANCE = [
    f"{API}/core",
    f"{API}/collections",
    f"{API}/ogcapi-features",
    f"{API}/item-search",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
    "http://www.opengis.net/spec/ogcapi-common-2/1.0/conf/simple-collections",
]
JSON = "application/json"
GEOJSON = "application/geo+json"
DEFAULT_LIMIT = 10
MAX_LIMIT = 1000
BAD_REQUEST = "https://api.stacspec.org/v1.0.0/errors/invalid-parameter"


def _invalid(path: str, message: str) -> Problem:
    return Problem(
        400,
        BAD_REQUEST,
        "Invalid parameter",
        f"{path}: {message}",
        errors=[{"path": path, "message": message}],
    )


def _link(rel: str, href: str, media_type: str = JSON, **extra: Any) -> dict[str, Any]:
    return {"rel": rel, "href": href, "type": media_type, **extra}


def _visible(request: Request) -> QuerySet[Dataset]:
    return dataset_list_visible(request.user).select_related("project").order_by("name")


def _dataset(request: Request, collection_id: str) -> Dataset:
    row = _visible(request).filter(name=collection_id).first()
    if row is None:
        raise Problem(404, "about:blank", "Not Found", f"no collection {collection_id!r}")
    return row


def collection_doc(dataset: Dataset, base: str) -> dict[str, Any]:
    doc = stac.collection(dataset).to_dict(include_self_link=False, transform_hrefs=False)
    here = f"{base}/collections/{dataset.name}"
    doc["links"] = [
        _link("self", here),
        _link("root", f"{base}/"),
        _link("parent", f"{base}/"),
        _link("items", f"{here}/items", GEOJSON),
    ]
    return doc


def item_doc(dataset: Dataset, base: str) -> dict[str, Any]:
    doc = stac.item(dataset).to_dict(include_self_link=False, transform_hrefs=False)
    collection = f"{base}/collections/{dataset.name}"
    doc["links"] = [
        _link("self", f"{collection}/items/{dataset.name}", GEOJSON),
        _link("parent", collection),
        _link("collection", collection),
        _link("root", f"{base}/"),
    ]
    return doc


def _feature_collection(
    rows: list[Dataset], base: str, links: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "type": "FeatureCollection",
        "features": [item_doc(d, base) for d in rows],
        "numberReturned": len(rows),
        "links": links,
    }


class LandingPage(FaceView):
    public = True
    problem_base = API

    def get(self, request: Request) -> HttpResponse:
        import pystac  # on use: importing it costs a web process about half a second

        base = root_url(request, PREFIX)
        catalog = pystac.Catalog(
            id="portal",
            title="Multi-site workflow portal: datasets",
            description="Every dataset of the fleet as a collection; its replicas at the "
            "sites as alternate hrefs of one item (storage extension).",
        ).to_dict(include_self_link=False, transform_hrefs=False)
        children = [
            _link("child", f"{base}/collections/{d.name}", title=d.name) for d in _visible(request)
        ]
        catalog["conformsTo"] = CONFORMANCE
        catalog["links"] = [
            _link("self", f"{base}/"),
            _link("root", f"{base}/"),
            _link("conformance", f"{base}/conformance"),
            _link("data", f"{base}/collections"),
            _link("search", f"{base}/search", GEOJSON, method="GET"),
            _link("search", f"{base}/search", GEOJSON, method="POST"),
            *children,
        ]
        return json_response(catalog)


class Conformance(FaceView):
    public = True

    def get(self, request: Request) -> HttpResponse:
        return json_response({"conformsTo": CONFORMANCE})


class CollectionList(FaceView):
    def get(self, request: Request) -> HttpResponse:
        base = root_url(request, PREFIX)
        return json_response(
            {
                "collections": [collection_doc(d, base) for d in _visible(request)],
                "links": [_link("self", f"{base}/collections"), _link("root", f"{base}/")],
            }
        )


class CollectionDetail(FaceView):
    def get(self, request: Request, collection_id: str) -> HttpResponse:
        return json_response(
            collection_doc(_dataset(request, collection_id), root_url(request, PREFIX))
        )


class ItemList(FaceView):
    def get(self, request: Request, collection_id: str) -> HttpResponse:
        dataset = _dataset(request, collection_id)
        base = root_url(request, PREFIX)
        here = f"{base}/collections/{dataset.name}/items"
        links = [
            _link("self", here, GEOJSON),
            _link("collection", f"{base}/collections/{dataset.name}"),
        ]
        doc = _feature_collection([dataset], base, links)
        doc["numberMatched"] = 1
        return json_response(doc, content_type=GEOJSON)


class ItemDetail(FaceView):
    def get(self, request: Request, collection_id: str, item_id: str) -> HttpResponse:
        dataset = _dataset(request, collection_id)
        if item_id != dataset.name:
            raise Problem(
                404, "about:blank", "Not Found", f"no item {item_id!r} in {collection_id!r}"
            )
        return json_response(item_doc(dataset, root_url(request, PREFIX)), content_type=GEOJSON)


def _strings(value: Any, path: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise _invalid(path, "must be a list of strings")


def _interval(value: Any) -> tuple[datetime | None, datetime | None] | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise _invalid("datetime", "must be an RFC 3339 instant or interval")
    parts = value.split("/")
    if len(parts) > 2:
        raise _invalid("datetime", "at most one '/'")
    bounds: list[datetime | None] = []
    for part in parts:
        if part in ("", ".."):
            bounds.append(None)
            continue
        try:
            parsed = parse_datetime(part)
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise _invalid("datetime", f"{part!r} is not an RFC 3339 date-time with a time zone")
        bounds.append(parsed)
    if len(bounds) == 1:
        return bounds[0], bounds[0]
    return bounds[0], bounds[1]


class Search(FaceView):
    """Item search: ``collections``, ``ids``, ``datetime``, ``limit`` (paged with ``token``);
    ``bbox`` and ``intersects`` are checked for form and keep every item (no footprints)."""

    parser_classes = [RawBody]

    def get(self, request: Request) -> HttpResponse:
        params = {k: request.query_params.get(k) for k in request.query_params}
        return self.search(request, params)

    def post(self, request: Request) -> HttpResponse:
        body = json_body(request, BAD_REQUEST)
        if not isinstance(body, dict):
            raise _invalid("", "the body must be a JSON object")
        return self.search(request, body)

    def search(self, request: Request, params: dict[str, Any]) -> HttpResponse:
        rows = _visible(request)
        collections = _strings(params.get("collections"), "collections")
        ids = _strings(params.get("ids"), "ids")
        if collections:
            rows = rows.filter(name__in=collections)
        if ids:
            rows = rows.filter(name__in=ids)
        interval = _interval(params.get("datetime"))
        if interval is not None:
            start, end = interval
            if start is not None:
                rows = rows.filter(created_at__gte=start)
            if end is not None:
                rows = rows.filter(created_at__lte=end)
        bbox = params.get("bbox")
        if bbox is not None:
            values = bbox.split(",") if isinstance(bbox, str) else bbox
            try:
                numbers = [float(v) for v in values]
            except (TypeError, ValueError):
                numbers = []
            if len(numbers) not in (4, 6):
                raise _invalid("bbox", "must be 4 or 6 numbers")
        limit, offset = DEFAULT_LIMIT, 0
        for key, raw in (("limit", params.get("limit")), ("token", params.get("token"))):
            if raw in (None, ""):
                continue
            text = str(raw).removeprefix("next:")
            if not text.isdigit():
                raise _invalid(
                    key, "must be a whole number" if key == "limit" else "not a token of this API"
                )
            if key == "limit":
                limit = int(text)
                if not 1 <= limit <= MAX_LIMIT:
                    raise _invalid("limit", f"must be between 1 and {MAX_LIMIT}")
            else:
                offset = int(text)
        page = list(rows.prefetch_related("replicas__site")[offset : offset + limit + 1])
        base = root_url(request, PREFIX)
        links = [_link("root", f"{base}/")]
        if len(page) > limit:
            query = {
                "limit": str(limit),
                "token": f"next:{offset + limit}",
                **({"collections": ",".join(collections)} if collections else {}),
                **({"ids": ",".join(ids)} if ids else {}),
                **({"datetime": params["datetime"]} if params.get("datetime") else {}),
            }
            from urllib.parse import urlencode

            links.append(_link("next", f"{base}/search?{urlencode(query)}", GEOJSON, method="GET"))
        doc = _feature_collection(page[:limit], base, links)
        return json_response(doc, content_type=GEOJSON)
