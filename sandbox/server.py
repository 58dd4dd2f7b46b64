"""The Kubernetes API over HTTP (aiohttp): discovery, CRUD, patch, watch, tables, faults."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
import yaml
from aiohttp import web

from sandbox import chunks, printer
from sandbox import patch as patchlib
from sandbox.errors import ApiError
from sandbox.karmada import proxy
from sandbox.karmada.proxy import split_proxy_path
from sandbox.resources import SELF_SUBJECT_ACCESS_REVIEW, VERBS, ResourceType
from sandbox.selectors import parse_field_selector, parse_label_selector
from sandbox.store import Event, Obj, Watcher, clone

if TYPE_CHECKING:
    from sandbox.core import Sandbox

log = logging.getLogger("sandbox.server")

VERSION_INFO = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
DEFAULT_WATCH_TIMEOUT = 1800.0


def dumps(obj: Any) -> str:
    """Compact JSON (orjson: answers and watch events were a tenth of the sandbox's time
    under a fan-out); what orjson refuses goes through the standard library."""
    try:
        return orjson.dumps(obj).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(obj, separators=(",", ":"))


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(body), status=status, content_type="application/json")


def error_response(err: ApiError) -> web.Response:
    return json_response(err.status(), status=err.code)


class Api:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        self.store = sandbox.store
        self.registry = sandbox.store.registry
        # Requests served on the Kubernetes paths, by verb: a fixed-size table, so counting
        # costs no memory over a long demo. Benchmarks read it at /_sandbox/stats.
        self.request_counts: dict[str, int] = {}

    # -- app -----------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=16 * 2**20)
        app.router.add_route("*", "/_sandbox/{tail:.*}", self.sandbox_endpoint)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not request.path.startswith("/_sandbox"):
            verb = request.method
            if verb == "GET" and request.query.get("watch") in ("1", "true", "True"):
                verb = "WATCH"
            self.request_counts[verb] = self.request_counts.get(verb, 0) + 1
            status, delay = self.sb.faults.api_fault(request.path)
            if delay:
                await asyncio.sleep(delay)
            if status is not None:
                return error_response(
                    ApiError(
                        status,
                        "InternalError" if status >= 500 else "BadRequest",
                        f"Internal error occurred: injected sandbox fault ({status})",
                    )
                )
        try:
            if not request.path.startswith("/_sandbox"):
                # Every Kubernetes call: who it is (401 for an unknown token), then RBAC (403).
                user = self.sb.authz.authenticate(request.headers.get("Authorization"))
                self.sb.authz.authorize(user, request.method, request.path, request.query)
                request["user"] = user
            return await handler(request)
        except ApiError as err:
            return error_response(err)
        except web.HTTPException:
            raise
        except Exception as exc:  # pragma: no cover - a bug, but the client gets a Status
            log.exception("unhandled error on %s %s", request.method, request.path)
            return error_response(ApiError(500, "InternalError", f"Internal error: {exc}"))

    # -- discovery -----------------------------------------------------------------------
    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = []
        for t in self.registry.in_group_version(group, version):
            entry = {
                "name": t.plural,
                "singularName": t.singular,
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": VERBS,
                "shortNames": list(t.short_names),
                "storageVersionHash": "",
            }
            if t.categories:
                entry["categories"] = list(t.categories)
            resources.append(entry)
            if t.status_subresource:
                resources.append(
                    {
                        "name": f"{t.plural}/status",
                        "singularName": "",
                        "namespaced": t.namespaced,
                        "kind": t.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def _group(self, name: str, versions: list[str]) -> dict[str, Any]:
        vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": vs, "preferredVersion": vs[0]}

    def discovery(self, path: str, request: web.Request) -> web.StreamResponse | None:
        p = path.rstrip("/") or "/"
        if p == "/version":
            return json_response(VERSION_INFO)
        if p in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if p == "/openapi/v2":
            return web.Response(body=b"", content_type="application/octet-stream")
        if p.startswith("/openapi"):
            return error_response(
                ApiError(404, "NotFound", "the server could not find the requested resource")
            )
        if p == "/api":
            return json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                    ],
                }
            )
        if p == "/api/v1":
            return json_response(self._resource_list("", "v1"))
        if p == "/apis":
            return json_response(
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [self._group(g, vs) for g, vs in self.registry.groups().items()],
                }
            )
        parts = p.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2:
            versions = self.registry.groups().get(parts[1])
            if versions is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return json_response(
                {"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1], versions)}
            )
        if parts[0] == "apis" and len(parts) == 3:
            if not self.registry.in_group_version(parts[1], parts[2]):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return json_response(self._resource_list(parts[1], parts[2]))
        return None

    # -- routing -------------------------------------------------------------------------
    def _route(self, path: str) -> tuple[ResourceType, str | None, str | None, str | None] | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if not rest:
            return None
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = self.registry.lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rtype = self.registry.lookup(group, version, rest[0])
        if rtype is None or len(rest) > 3:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and (sub != "status" or not rtype.status_subresource):
            return None
        if not rtype.namespaced:
            namespace = None
        return rtype, namespace, name, sub

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "GET":
            found = self.discovery(path, request)
            if found is not None:
                return found
        proxied = split_proxy_path(path)
        if proxied is not None:
            return await proxy.handle(self.sb, request, *proxied)
        route = self._route(path)
        if route is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rtype, namespace, name, sub = route
        q = request.query
        m = request.method
        if rtype is SELF_SUBJECT_ACCESS_REVIEW:
            if m != "POST" or name is not None:
                raise ApiError(405, "MethodNotAllowed", f"method {m} not allowed")
            return json_response(
                self.sb.authz.review(request["user"], await self._body(request)), 201
            )
        if name is None:
            if m == "GET":
                if _truthy(q.get("watch")):
                    return await self.watch(request, rtype, namespace)
                return self.list_view(request, rtype, namespace)
            if m == "POST":
                body = await self._body(request)
                if rtype.status_subresource and isinstance(body, dict):
                    body.pop("status", None)  # set through /status only
                obj = await self.sb.admit_create(rtype, body, namespace)
                if q.get("dryRun"):
                    return json_response(obj, 201)
                return json_response(self.store.create(rtype, obj, namespace), 201)
            if m == "DELETE":
                lm = parse_label_selector(q.get("labelSelector"))
                fm = parse_field_selector(q.get("fieldSelector"))
                gone = [
                    self.store.delete(rtype, o["metadata"].get("namespace"), o["metadata"]["name"])
                    for o in self.store.list_objects(rtype, namespace, lm, fm)
                ]
                return json_response(self._list_body(rtype, gone))
            raise ApiError(405, "MethodNotAllowed", f"method {m} not allowed")
        if m == "GET":
            obj = self.store.get(rtype, namespace, name)
            if self._wants_table(request):
                return json_response(self._table(rtype, [obj]))
            return json_response(obj)
        if m == "PUT":
            body = await self._body(request)
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
                body = self.sb.admit_update(rtype, body, self.store.find(rtype, namespace, name))
            return json_response(self.store.update(rtype, body, namespace, subresource=sub))
        if m == "PATCH":
            return await self.patch(request, rtype, namespace, name, sub)
        if m == "DELETE":
            opts: dict[str, Any] = {}
            if request.can_read_body:
                raw = await request.read()
                if raw.strip():
                    try:
                        opts = json.loads(raw)
                    except ValueError as exc:
                        raise ApiError.bad_request(f"invalid delete options: {exc}") from exc
            return json_response(
                self.store.delete(rtype, namespace, name, (opts or {}).get("preconditions"))
            )
        raise ApiError(405, "MethodNotAllowed", f"method {m} not allowed")

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            if "yaml" in (request.content_type or ""):
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError.bad_request(f"the request body is not valid: {exc}") from exc

    # -- list / patch --------------------------------------------------------------------
    def _list_body(self, rtype: ResourceType, items: list[Obj]) -> dict[str, Any]:
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": items,
        }

    def list_view(self, request: web.Request, rtype: ResourceType, ns: str | None) -> web.Response:
        q = request.query
        lm = parse_label_selector(q.get("labelSelector"))
        fm = parse_field_selector(q.get("fieldSelector"))
        limit = chunks.parse_limit(q.get("limit"))
        token = q.get("continue") or ""
        items = self.store.list_objects(rtype, ns, lm, fm)
        meta: dict[str, Any] = {}
        if limit or token:
            items, meta = chunks.chunk(
                items,
                limit=limit,
                token=token,
                resource_version=q.get("resourceVersion") or "",
                selected=bool(q.get("labelSelector") or q.get("fieldSelector")),
                current_rv=self.store.rv,
                compactor=self.store.compactor,
                now=time.monotonic(),
            )
        body = (
            self._table(rtype, items)
            if self._wants_table(request)
            else self._list_body(rtype, items)
        )
        body.setdefault("metadata", {}).update(meta)
        return json_response(body)

    async def patch(
        self,
        request: web.Request,
        rtype: ResourceType,
        ns: str | None,
        name: str,
        sub: str | None,
    ) -> web.Response:
        ctype = request.content_type or ""
        body = await self._body(request)
        current = self.store.find(rtype, ns, name)
        if ctype == "application/apply-patch+yaml":
            if not isinstance(body, dict):
                raise ApiError.bad_request("apply patch body must be an object")
            if current is None:
                if sub is not None:
                    raise ApiError.not_found(rtype.group, rtype.plural, name)
                body.setdefault("metadata", {})["name"] = name
                if rtype.status_subresource:
                    body.pop("status", None)
                obj = await self.sb.admit_create(rtype, body, ns)
                return json_response(self.store.create(rtype, obj, ns), 201)
            new = patchlib.merge_patch(current, body)
        else:
            if current is None:
                raise ApiError.not_found(rtype.group, rtype.plural, name)
            if ctype == "application/json-patch+json":
                new = patchlib.json_patch(current, body)
            elif ctype in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                if not isinstance(body, dict):
                    raise ApiError.bad_request("the body of a merge patch must be a JSON object")
                new = patchlib.merge_patch(current, body)
            else:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format: {ctype}",
                )
        if not isinstance(new, dict):
            raise ApiError.bad_request("the patch result is not an object")
        new.setdefault("metadata", {})["name"] = name
        if sub is None:
            new = self.sb.admit_update(rtype, new, current)
        return json_response(self.store.update(rtype, new, ns, subresource=sub))

    # -- tables (kubectl get) ------------------------------------------------------------
    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _table(self, rtype: ResourceType, items: list[Obj], with_columns: bool = True) -> Obj:
        columns = printer.columns_of(rtype.printer_columns)
        table: Obj = printer.table(columns, items, str(self.store.rv))
        if not with_columns:
            # A watch sends the column definitions with its first event only (later rows
            # are printed under the same header).
            table.pop("columnDefinitions")
        return table

    # -- watch ---------------------------------------------------------------------------
    def _watch_start(
        self, rtype: ResourceType, ns: str | None, watcher: Watcher, rv: str
    ) -> tuple[list[tuple[str, Obj]], ApiError | None]:
        """What a new watch sends first: synthetic ADDED for every object without a
        resourceVersion, else the logged events since it, or the 410 to send when too old."""
        if rv in ("", "0"):
            objs = self.store.list_objects(rtype, ns, watcher.label_match, watcher.field_match)
            return [("ADDED", o) for o in objs], None
        try:
            start = int(rv)
        except ValueError as exc:
            raise ApiError.bad_request(f"invalid resourceVersion {rv!r}") from exc
        initial: list[tuple[str, Obj]] = []
        try:
            for ev in self.store.events_since(start):
                kind = watcher.wants(ev)
                if kind:
                    initial.append((kind, ev.obj))
        except ApiError as err:
            return [], err
        return initial, None

    async def watch(
        self, request: web.Request, rtype: ResourceType, ns: str | None
    ) -> web.StreamResponse:
        q = request.query
        watcher = Watcher(
            rtype,
            ns,
            parse_label_selector(q.get("labelSelector")),
            parse_field_selector(q.get("fieldSelector")),
        )
        rv = q.get("resourceVersion", "")
        table = self._wants_table(request)
        try:
            timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        except ValueError as exc:
            raise ApiError.bad_request("timeoutSeconds must be a number") from exc
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        initial, expired = self._watch_start(rtype, ns, watcher, rv)
        if expired is None:
            self.store.watchers.add(watcher)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        first_table = True

        async def send(kind: str, obj: Obj) -> None:
            nonlocal first_table
            if table and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = self._table(rtype, [obj], with_columns=first_table)
                first_table = False
            await resp.write((dumps({"type": kind, "object": obj}) + "\n").encode())

        try:
            if expired is not None:
                await send("ERROR", expired.status())
                return resp
            for kind, obj in initial:
                await send(kind, obj)
            deadline = time.monotonic() + timeout
            interval = self.sb.config.bookmark_interval
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                try:
                    got: Event | None = await asyncio.wait_for(
                        watcher.queue.get(), min(remaining, interval if bookmarks else 5.0)
                    )
                except TimeoutError:
                    # A bookmark says "every event up to here was sent": never while events
                    # wait in the queue (they came in while the wait was cancelled), nor
                    # once the watcher overflowed (its later events were dropped, and the
                    # client resumes from the bookmark), as kube-apiserver's cacheWatcher
                    # sends one only in order with the events.
                    if watcher.overflowed:
                        break
                    if bookmarks and time.monotonic() < deadline and watcher.queue.empty():
                        await send(
                            "BOOKMARK",
                            {
                                "kind": rtype.kind,
                                "apiVersion": rtype.api_version,
                                "metadata": {"resourceVersion": str(self.store.rv)},
                            },
                        )
                    continue
                if got is None:
                    break
                etype = watcher.wants(got)
                if etype:
                    await send(etype, got.obj)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await resp.write_eof()
        return resp

    # -- sandbox control endpoints -------------------------------------------------------
    async def sandbox_endpoint(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"].strip("/")
        m = request.method
        faults = self.sb.faults
        if tail == "faults":
            if m == "GET":
                return json_response({"items": [f.to_dict() for f in faults.active()]})
            if m == "POST":
                body = await self._body(request)
                if not isinstance(body, dict):
                    raise ApiError.bad_request("fault must be an object")
                fault = faults.add(body)
                log.info("fault added: %s", fault.to_dict())
                self.sb.poke(everything=True)
                return json_response(fault.to_dict(), 201)
            if m == "DELETE":
                faults.clear()
                log.info("faults cleared")
                self.sb.poke(everything=True)
                return json_response({"status": "cleared"})
        if tail.startswith("faults/") and m == "DELETE":
            if not faults.remove(tail.split("/", 1)[1]):
                raise ApiError(404, "NotFound", f"fault {tail.split('/', 1)[1]} not found")
            self.sb.poke(everything=True)
            return json_response({"status": "removed"})
        if tail == "reset" and m == "POST":
            self.sb.reset()
            log.info("reset to the fleet at resourceVersion %s", self.store.rv)
            return json_response({"status": "reset", "resourceVersion": str(self.store.rv)})
        if tail == "compact" and m == "POST":
            # Like an etcd compaction: every watch or continue token from before gets 410.
            self.store.compact()
            return json_response({"compactedUpTo": str(self.store.evicted_rv)})
        if tail == "state" and m == "GET":
            return json_response(self.sb.state())
        if tail == "stats" and m == "GET":
            counts = dict(self.request_counts)
            return json_response({"requests": counts, "total": sum(counts.values())})
        if tail == "authz" and m == "GET":
            # Who was refused what, most recent last (bounded), and the identities' users.
            authz = self.sb.authz
            users = {name: user.name for name, (_t, user) in authz.identities.items()}
            return json_response({"identities": users, "denials": list(authz.denials)})
        if tail == "repositories" and m == "GET":
            # Each site's artifact repository: its S3 listener's real URL beside the endpoint
            # name a client sends as Host (sandbox/s3/); empty without --execute.
            items = self.sb.repositories.describe() if self.sb.config.execute else []
            return json_response({"items": items})
        if tail == "ready" and m == "GET":
            return json_response({"ready": True})
        if tail == "resume" and m == "POST":
            body = await self._body(request)
            count = self.sb.resume(
                str(body.get("namespace", "default")), str(body["name"]), body.get("node")
            )
            return json_response({"resumed": count})
        parts = tail.split("/")
        if len(parts) == 3 and parts[0] == "members" and parts[2] == "workflows" and m == "GET":
            return json_response({"items": self.sb.member_workflows(parts[1])})
        # -- a member's own API (issue 16: direct Workflows, Secrets/ConfigMaps, pod logs) --
        if len(parts) >= 3 and parts[0] == "members":
            from sandbox.argo.endpoint import member_endpoint

            body = await self._body(request) if m in ("POST", "PUT") else None
            code, payload = member_endpoint(self.sb, m, parts[1:], body, dict(request.query))
            if isinstance(payload, str):
                return web.Response(text=payload, status=code, content_type="text/plain")
            return json_response(payload, code)
        raise ApiError(404, "NotFound", f"no sandbox endpoint {request.method} /_sandbox/{tail}")


def _truthy(value: str | None) -> bool:
    # Go's strconv.ParseBool, which the apiserver uses: the Python client sends "True".
    return value in ("1", "t", "T", "true", "TRUE", "True")


__all__ = ["Api", "clone"]
