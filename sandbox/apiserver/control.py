"""The sandbox's own endpoints under `/_sandbox`: faults, reset, compaction, state and
figures, RBAC denials, the artifact repositories, resuming a suspended node and each member's
own API (direct Workflows, Secrets and ConfigMaps, pod logs)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from sandbox import heap
from sandbox.apiserver.responses import json_response, read_body
from sandbox.argo.endpoint import member_endpoint
from sandbox.core import Sandbox
from sandbox.errors import ApiError

log = logging.getLogger("sandbox.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Control:
    def __init__(self, sandbox: Sandbox, request_counts: dict[str, int]) -> None:
        self.sb = sandbox
        self.store = sandbox.store
        # Requests served on the Kubernetes paths, by verb (counted by the app's middleware).
        self.request_counts = request_counts
        self.handlers: dict[tuple[str, str], Handler] = {
            ("faults", "GET"): self.list_faults,
            ("faults", "POST"): self.add_fault,
            ("faults", "DELETE"): self.clear_faults,
            ("reset", "POST"): self.reset,
            ("compact", "POST"): self.compact,
            ("state", "GET"): self.state,
            ("stats", "GET"): self.stats,
            ("authz", "GET"): self.authz,
            ("repositories", "GET"): self.repositories,
            ("ready", "GET"): self.ready,
            ("resume", "POST"): self.resume,
        }

    async def endpoint(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"].strip("/")
        m = request.method
        handler = self.handlers.get((tail, m))
        if handler is not None:
            return await handler(request)
        if tail.startswith("faults/") and m == "DELETE":
            return self.remove_fault(tail.split("/", 1)[1])
        parts = tail.split("/")
        if len(parts) == 3 and parts[0] == "members" and parts[2] == "workflows" and m == "GET":
            return json_response({"items": self.sb.member_workflows(parts[1])})
        if len(parts) >= 3 and parts[0] == "members":
            return await self.member(request, parts[1:])
        raise ApiError(404, "NotFound", f"no sandbox endpoint {request.method} /_sandbox/{tail}")

    # -- faults ----------------------------------------------------------------------------
    async def list_faults(self, request: web.Request) -> web.Response:
        return json_response({"items": [f.to_dict() for f in self.sb.faults.active()]})

    async def add_fault(self, request: web.Request) -> web.Response:
        body = await read_body(request)
        if not isinstance(body, dict):
            raise ApiError.bad_request("fault must be an object")
        fault = self.sb.faults.add(body)
        log.info("fault added: %s", fault.to_dict())
        self.sb.poke(everything=True)
        return json_response(fault.to_dict(), 201)

    async def clear_faults(self, request: web.Request) -> web.Response:
        self.sb.faults.clear()
        log.info("faults cleared")
        self.sb.poke(everything=True)
        return json_response({"status": "cleared"})

    def remove_fault(self, fault_id: str) -> web.Response:
        if not self.sb.faults.remove(fault_id):
            raise ApiError(404, "NotFound", f"fault {fault_id} not found")
        self.sb.poke(everything=True)
        return json_response({"status": "removed"})

    # -- the fleet ---------------------------------------------------------------------------
    async def reset(self, request: web.Request) -> web.Response:
        self.sb.reset()
        log.info("reset to the fleet at resourceVersion %s", self.store.rv)
        return json_response({"status": "reset", "resourceVersion": str(self.store.rv)})

    async def compact(self, request: web.Request) -> web.Response:
        # Like an etcd compaction: every watch or continue token from before gets 410.
        self.store.compact()
        return json_response({"compactedUpTo": str(self.store.evicted_rv)})

    async def state(self, request: web.Request) -> web.Response:
        return json_response(self.sb.state())

    async def stats(self, request: web.Request) -> web.Response:
        counts = dict(self.request_counts)
        return json_response(
            {"requests": counts, "total": sum(counts.values()), "heap": heap.described()}
        )

    async def authz(self, request: web.Request) -> web.Response:
        # Who was refused what, most recent last (bounded), and the identities' users.
        authz = self.sb.authz
        users = {name: user.name for name, (_t, user) in authz.identities.items()}
        return json_response({"identities": users, "denials": list(authz.denials)})

    async def repositories(self, request: web.Request) -> web.Response:
        # Each site's artifact repository: its S3 listener's real URL beside the endpoint
        # name a client sends as Host (sandbox/s3/); empty without --execute.
        items = self.sb.repositories.describe() if self.sb.config.execute else []
        return json_response({"items": items})

    async def ready(self, request: web.Request) -> web.Response:
        return json_response({"ready": True})

    async def resume(self, request: web.Request) -> web.Response:
        body = await read_body(request)
        count = self.sb.resume(
            str(body.get("namespace", "default")), str(body["name"]), body.get("node")
        )
        return json_response({"resumed": count})

    async def member(self, request: web.Request, parts: list[str]) -> web.Response:
        """A member's own API: direct Workflows, Secrets and ConfigMaps, pod logs."""
        m = request.method
        body = await read_body(request) if m in ("POST", "PUT") else None
        code, payload = member_endpoint(self.sb, m, parts, body, dict(request.query))
        if isinstance(payload, str):
            return web.Response(text=payload, status=code, content_type="text/plain")
        return json_response(payload, code)
