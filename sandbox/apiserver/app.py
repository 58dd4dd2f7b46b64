"""The application: its middleware (request figures, injected API faults, authentication and
RBAC, errors as Status) and the dispatch of a request to discovery, the cluster proxy, or a
resource's handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from sandbox.apiserver import watch
from sandbox.apiserver.control import Control
from sandbox.apiserver.crud import Crud
from sandbox.apiserver.discovery import Discovery
from sandbox.apiserver.responses import (
    error_response,
    json_response,
    not_allowed,
    not_found,
    read_body,
    truthy,
)
from sandbox.apiserver.routes import Route, route
from sandbox.core import Sandbox
from sandbox.errors import ApiError
from sandbox.karmada import proxy
from sandbox.karmada.proxy import split_proxy_path
from sandbox.resources import SELF_SUBJECT_ACCESS_REVIEW

log = logging.getLogger("sandbox.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Api:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        self.store = sandbox.store
        self.registry = sandbox.store.registry
        # Requests served on the Kubernetes paths, by verb: a fixed-size table, so counting
        # costs no memory over a long demo. Benchmarks read it at /_sandbox/stats.
        self.request_counts: dict[str, int] = {}
        self.discovery = Discovery(self.registry)
        self.crud = Crud(sandbox)
        self.control = Control(sandbox, self.request_counts)

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=16 * 2**20)
        app.router.add_route("*", "/_sandbox/{tail:.*}", self.control.endpoint)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/_sandbox"):
            faulted = await self._count_and_fault(request)
            if faulted is not None:
                return faulted
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

    async def _count_and_fault(self, request: web.Request) -> web.Response | None:
        """Count a Kubernetes call by verb; the injected API fault's answer, if one applies."""
        verb = request.method
        if verb == "GET" and request.query.get("watch") in ("1", "true", "True"):
            verb = "WATCH"
        self.request_counts[verb] = self.request_counts.get(verb, 0) + 1
        status, delay = self.sb.faults.api_fault(request.path)
        if delay:
            await asyncio.sleep(delay)
        if status is None:
            return None
        return error_response(
            ApiError(
                status,
                "InternalError" if status >= 500 else "BadRequest",
                f"Internal error occurred: injected sandbox fault ({status})",
            )
        )

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "GET":
            found = self.discovery.answer(path, request)
            if found is not None:
                return found
        proxied = split_proxy_path(path)
        if proxied is not None:
            return await proxy.handle(self.sb, request, *proxied)
        found_route = route(self.registry, path)
        if found_route is None:
            raise not_found()
        if found_route.rtype is SELF_SUBJECT_ACCESS_REVIEW:
            return await self._access_review(request, found_route)
        if found_route.name is None:
            return await self._collection(request, found_route)
        return await self.crud.item(request, found_route)

    async def _access_review(self, request: web.Request, found: Route) -> web.Response:
        if request.method != "POST" or found.name is not None:
            raise not_allowed(request.method)
        review = self.sb.authz.review(request["user"], await read_body(request))
        return json_response(review, 201)

    async def _collection(self, request: web.Request, found: Route) -> web.StreamResponse:
        rtype, namespace = found.rtype, found.namespace
        m = request.method
        if m == "GET":
            if truthy(request.query.get("watch")):
                interval = self.sb.config.bookmark_interval
                return await watch.watch(self.store, interval, request, rtype, namespace)
            return self.crud.list_view(request, rtype, namespace)
        if m == "POST":
            return await self.crud.create(request, rtype, namespace)
        if m == "DELETE":
            return self.crud.delete_collection(request, rtype, namespace)
        raise not_allowed(m)
