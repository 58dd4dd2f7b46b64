"""Discovery: /version, the health paths, /api, /apis and each group version's resources."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sandbox.apiserver.responses import error_response, json_response, not_found
from sandbox.resources import VERBS, Registry

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


class Discovery:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def resource_list(self, group: str, version: str) -> dict[str, Any]:
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

    @staticmethod
    def group(name: str, versions: list[str]) -> dict[str, Any]:
        vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": vs, "preferredVersion": vs[0]}

    def answer(self, path: str, request: web.Request) -> web.StreamResponse | None:
        """The answer to a GET of a discovery path, None when `path` is not one."""
        p = path.rstrip("/") or "/"
        if p == "/version":
            return json_response(VERSION_INFO)
        if p in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if p == "/openapi/v2":
            return web.Response(body=b"", content_type="application/octet-stream")
        if p.startswith("/openapi"):
            return error_response(not_found())
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
            return json_response(self.resource_list("", "v1"))
        if p == "/apis":
            groups = [self.group(g, vs) for g, vs in self.registry.groups().items()]
            return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        return self._group_path(p.strip("/").split("/"))

    def _group_path(self, parts: list[str]) -> web.StreamResponse | None:
        """/apis/<group> and /apis/<group>/<version>."""
        if parts[0] == "apis" and len(parts) == 2:
            versions = self.registry.groups().get(parts[1])
            if versions is None:
                raise not_found()
            return json_response(
                {"kind": "APIGroup", "apiVersion": "v1", **self.group(parts[1], versions)}
            )
        if parts[0] == "apis" and len(parts) == 3:
            if not self.registry.in_group_version(parts[1], parts[2]):
                raise not_found()
            return json_response(self.resource_list(parts[1], parts[2]))
        return None
