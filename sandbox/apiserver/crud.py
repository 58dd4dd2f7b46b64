"""The resource handlers: a collection's list, create and delete, an object's get, update,
patch and delete, and the Table form `kubectl get` asks for (as kube-apiserver's
`pkg/endpoints/handlers`: get.go, create.go, update.go, patch.go, delete.go)."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from sandbox import chunks, printer
from sandbox import patch as patchlib
from sandbox.apiserver.responses import json_response, not_allowed, read_body
from sandbox.apiserver.routes import Route
from sandbox.core import Sandbox
from sandbox.errors import ApiError
from sandbox.resources import ResourceType
from sandbox.selectors import parse_field_selector, parse_label_selector
from sandbox.store import Obj, Store

MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def table(store: Store, rtype: ResourceType, items: list[Obj], with_columns: bool = True) -> Obj:
    columns = printer.columns_of(rtype.printer_columns)
    out: Obj = printer.table(columns, items, str(store.rv))
    if not with_columns:
        # A watch sends the column definitions with its first event only (later rows
        # are printed under the same header).
        out.pop("columnDefinitions")
    return out


class Crud:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        self.store = sandbox.store

    # -- a collection ----------------------------------------------------------------------
    async def create(
        self, request: web.Request, rtype: ResourceType, ns: str | None
    ) -> web.Response:
        body = await read_body(request)
        if rtype.status_subresource and isinstance(body, dict):
            body.pop("status", None)  # set through /status only
        obj = await self.sb.admit_create(rtype, body, ns)
        if request.query.get("dryRun"):
            return json_response(obj, 201)
        return json_response(self.store.create(rtype, obj, ns), 201)

    def delete_collection(
        self, request: web.Request, rtype: ResourceType, ns: str | None
    ) -> web.Response:
        q = request.query
        lm = parse_label_selector(q.get("labelSelector"))
        fm = parse_field_selector(q.get("fieldSelector"))
        gone = [
            self.store.delete(rtype, o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in self.store.list_objects(rtype, ns, lm, fm)
        ]
        return json_response(self.list_body(rtype, gone))

    def list_body(self, rtype: ResourceType, items: list[Obj]) -> dict[str, Any]:
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": items,
        }

    def list_view(self, request: web.Request, rtype: ResourceType, ns: str | None) -> web.Response:
        q = request.query
        # None without a selector: every object matches, and a chunk counts what follows it.
        lm = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fm = parse_field_selector(q["fieldSelector"]) if q.get("fieldSelector") else None
        limit = chunks.parse_limit(q.get("limit"))
        token = q.get("continue") or ""
        meta: dict[str, Any] = {}
        if limit or token:
            rv, start = chunks.continue_point(
                token,
                resource_version=q.get("resourceVersion") or "",
                current_rv=self.store.rv,
                compactor=self.store.compactor,
                now=time.monotonic(),
            )
            items, remaining = self.store.list_range(rtype, ns, lm, fm, start=start, limit=limit)
            selected = lm is not None or fm is not None
            meta = chunks.page_meta(rv, items, remaining=remaining, selected=selected)
        else:
            items = self.store.list_objects(rtype, ns, lm, fm)
        body = (
            table(self.store, rtype, items)
            if wants_table(request)
            else self.list_body(rtype, items)
        )
        body.setdefault("metadata", {}).update(meta)
        return json_response(body)

    # -- an object -------------------------------------------------------------------------
    async def item(self, request: web.Request, route: Route) -> web.StreamResponse:
        rtype, ns, name, sub = route
        assert name is not None
        m = request.method
        if m == "GET":
            obj = self.store.get(rtype, ns, name)
            if wants_table(request):
                return json_response(table(self.store, rtype, [obj]))
            return json_response(obj)
        if m == "PUT":
            return await self.replace(request, route)
        if m == "PATCH":
            return await self.patch(request, rtype, ns, name, sub)
        if m == "DELETE":
            return await self.delete(request, rtype, ns, name)
        raise not_allowed(m)

    async def replace(self, request: web.Request, route: Route) -> web.Response:
        rtype, namespace, name, sub = route
        body = await read_body(request)
        meta = body.setdefault("metadata", {}) if isinstance(body, dict) else None
        if meta is None:
            raise ApiError.bad_request("body must be an object")
        if meta.get("name") and meta["name"] != name:
            raise ApiError.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the "
                f"URL ({name})"
            )
        meta["name"] = name
        if rtype.namespaced:
            meta.setdefault("namespace", namespace)
        if sub is None:
            assert name is not None
            body = self.sb.admit_update(rtype, body, self.store.find(rtype, namespace, name))
        return json_response(self.store.update(rtype, body, namespace, subresource=sub))

    async def delete(
        self, request: web.Request, rtype: ResourceType, ns: str | None, name: str
    ) -> web.Response:
        opts: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    opts = json.loads(raw)
                except ValueError as exc:
                    raise ApiError.bad_request(f"invalid delete options: {exc}") from exc
        return json_response(self.store.delete(rtype, ns, name, (opts or {}).get("preconditions")))

    async def patch(
        self,
        request: web.Request,
        rtype: ResourceType,
        ns: str | None,
        name: str,
        sub: str | None,
    ) -> web.Response:
        ctype = request.content_type or ""
        body = await read_body(request)
        current = self.store.find(rtype, ns, name)
        if ctype == "application/apply-patch+yaml":
            if not isinstance(body, dict):
                raise ApiError.bad_request("apply patch body must be an object")
            if current is None:
                return await self._apply_create(rtype, ns, name, sub, body)
            new = patchlib.merge_patch(current, body)
        else:
            if current is None:
                raise ApiError.not_found(rtype.group, rtype.plural, name)
            new = _patched(ctype, current, body)
        if not isinstance(new, dict):
            raise ApiError.bad_request("the patch result is not an object")
        new.setdefault("metadata", {})["name"] = name
        if sub is None:
            new = self.sb.admit_update(rtype, new, current)
        return json_response(self.store.update(rtype, new, ns, subresource=sub))

    async def _apply_create(
        self, rtype: ResourceType, ns: str | None, name: str, sub: str | None, body: Obj
    ) -> web.Response:
        """A server-side apply of an object that does not exist creates it."""
        if sub is not None:
            raise ApiError.not_found(rtype.group, rtype.plural, name)
        body.setdefault("metadata", {})["name"] = name
        if rtype.status_subresource:
            body.pop("status", None)
        obj = await self.sb.admit_create(rtype, body, ns)
        return json_response(self.store.create(rtype, obj, ns), 201)


def _patched(ctype: str, current: Obj, body: Any) -> Any:
    """`current` with a JSON patch or a merge patch applied, by the request's content type."""
    if ctype == "application/json-patch+json":
        return patchlib.json_patch(current, body)
    if ctype in MERGE_PATCHES:
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of a merge patch must be a JSON object")
        return patchlib.merge_patch(current, body)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {ctype}",
    )
