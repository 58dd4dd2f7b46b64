"""The cluster proxy of karmada-aggregated-apiserver:
`/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy/{path}` forwards to the member's
API (`pkg/registry/cluster/storage/proxy.go`, `pkg/util/proxy/proxy.go`). The member here
answers a few paths itself: pod logs (`container`, `tailLines`, `follow`) and Workflows (list,
get, delete: an `argo delete` at the site; replace: `argo resume`, see `_workflow_replace`).

Like upstream, a cluster without `spec.impersonatorSecretRef` (a pull-mode cluster whose
karmada-agent ran with `--report-secrets=None`; by default the agent reports it, see
`sandbox/fleet.py`) answers 500 `the impersonatorSecretRef of cluster <name> is nil`,
and an unreachable member a 500 with the dial error: `ConnectCluster` returns plain errors,
which the apiserver turns into a `Status` with reason `Unknown`."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from typing import Any, Protocol

from aiohttp import web

from sandbox.argo.member import ClusterHost, Member
from sandbox.authz.guard import Authz
from sandbox.errors import ApiError
from sandbox.karmada.controller import Karmada
from sandbox.resources import CLUSTER
from sandbox.store import Obj, clone, now_iso


class ProxyHost(ClusterHost, Protocol):
    """The members a request is proxied to, RBAC to check it by, and Karmada to tell of a
    Workflow deleted through the proxy."""

    @property
    def authz(self) -> Authz: ...

    @property
    def karmada(self) -> Karmada: ...


PREFIX = "/apis/cluster.karmada.io/v1alpha1/clusters/"
FOLLOW_POLL_S = 0.2
FOLLOW_MAX_S = 3600.0
POD_DONE = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")


def split_proxy_path(path: str) -> tuple[str, str] | None:
    """(cluster, member path) for a proxy path, else None."""
    if not path.startswith(PREFIX):
        return None
    rest = path[len(PREFIX) :].split("/", 2)
    if len(rest) < 2 or rest[1] != "proxy" or not rest[0]:
        return None
    return rest[0], "/" + (rest[2] if len(rest) > 2 else "")


def _unknown(message: str) -> ApiError:
    return ApiError(500, "Unknown", message)


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


async def handle(
    sb: ProxyHost, request: web.Request, cluster_name: str, path: str
) -> web.StreamResponse:
    cluster = sb.store.get(CLUSTER, None, cluster_name)
    spec = cluster.get("spec") or {}
    if not spec.get("apiEndpoint"):
        raise _unknown(f"API endpoint of cluster {cluster_name} should not be empty")
    if spec.get("impersonatorSecretRef") is None:
        raise _unknown(f"the impersonatorSecretRef of cluster {cluster_name} is nil")
    member = sb.members.get(cluster_name)
    if member is None or sb.faults.site_unreachable(cluster_name):
        host = str(spec["apiEndpoint"]).split("://", 1)[-1]
        raise _unknown(f"dial tcp {host}: i/o timeout")
    # The member's API server: Karmada's impersonator acting as the caller (unified auth).
    sb.authz.member_access(cluster_name, request["user"], request.method, path, request.query)
    parts = [p for p in path.split("/") if p]
    if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
        if parts[6] == "log" and request.method == "GET":
            return await _pod_log(request, member, parts[3], parts[5])
        raise _not_found()
    argo = ["apis", "argoproj.io", "v1alpha1", "namespaces"]
    if len(parts) in (6, 7) and parts[:4] == argo and parts[5] == "workflows":
        name = parts[6] if len(parts) == 7 else None
        if request.method == "PUT" and name is not None:
            return await _workflow_replace(request, member, parts[4], name)
        return _workflows(request, member, parts[4], name)
    raise _not_found()


def _member_workflow(member: Member, namespace: str, name: str) -> Obj | None:
    run = member.runs.get((namespace, name))
    if run is None:
        return None
    obj = clone(run.state.obj)
    meta = obj.setdefault("metadata", {})
    if run.state.started_at:
        meta["annotations"] = {**(meta.get("annotations") or {}), **run.state.pod_name_format()}
    meta["uid"] = run.state.uid
    meta["resourceVersion"] = str(run.state.version)
    meta.setdefault("creationTimestamp", run.state.started_at or now_iso())
    obj["status"] = run.state.render_status()
    return dict(obj)


def _workflows(
    request: web.Request, member: Member, namespace: str, name: str | None
) -> web.Response:
    def out(body: Any) -> web.Response:
        return web.Response(text=json.dumps(body), content_type="application/json")

    if name is None and request.method == "GET":
        items = [
            w
            for (ns, n) in sorted(member.runs)
            if ns == namespace and (w := _member_workflow(member, ns, n)) is not None
        ]
        return out(
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "WorkflowList",
                "metadata": {},
                "items": items,
            }
        )
    if name is None:
        raise ApiError(405, "MethodNotAllowed", f"method {request.method} not allowed")
    obj = _member_workflow(member, namespace, name)
    if obj is None:
        raise ApiError.not_found("argoproj.io", "workflows", name)
    if request.method == "GET":
        return out(obj)
    if request.method == "DELETE":
        # Deleted at the member: Karmada's execution controller re-creates it from the Work.
        member.delete(namespace, name)
        member.sb.karmada.mark((namespace, name))
        member.sb.poke()
        return out(obj)
    raise ApiError(405, "MethodNotAllowed", f"method {request.method} not allowed")


def _pod_phase(member: Member, namespace: str, pod: str) -> str | None:
    node = member.pod_node(namespace, pod)
    return None if node is None else str(node.get("phase", ""))


async def _pod_log(
    request: web.Request, member: Member, namespace: str, pod: str
) -> web.StreamResponse:
    q = request.query
    container = q.get("container", "main")
    try:
        tail = int(q["tailLines"]) if q.get("tailLines") else None
    except ValueError as exc:
        raise ApiError.bad_request(f"tailLines: invalid value {q['tailLines']!r}") from exc
    text = member.pod_log(namespace, pod, container, tail)
    if text is None:
        raise ApiError.not_found("", "pods", pod)
    if q.get("follow") not in ("1", "t", "T", "true", "TRUE", "True"):
        return web.Response(text=text, content_type="text/plain")
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    await resp.write(text.encode())
    sent = member.pod_log(namespace, pod, container, None) or ""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FOLLOW_MAX_S
    while loop.time() < deadline:
        phase = _pod_phase(member, namespace, pod)
        full = member.pod_log(namespace, pod, container, None)
        if full is not None and full.startswith(sent) and len(full) > len(sent):
            await resp.write(full[len(sent) :].encode())
            sent = full
        if phase is None or phase in POD_DONE or full is None:
            break
        transport = request.transport
        if transport is None or transport.is_closing():
            break
        await asyncio.sleep(FOLLOW_POLL_S)
    await resp.write_eof()
    return resp


def _nodes(status: Any) -> dict[str, Any]:
    """A Workflow status's nodes as Argo's controller reads them (``packer.DecompressWorkflow``,
    workflow/packer/packer.go): ``nodes``, else ``compressedNodes`` (base64 of gzipped JSON)."""
    if not isinstance(status, dict):
        return {}
    nodes = status.get("nodes")
    if isinstance(nodes, dict) and nodes:
        return nodes
    packed = status.get("compressedNodes")
    if not isinstance(packed, str) or not packed:
        return {}
    try:
        decoded = json.loads(gzip.decompress(base64.b64decode(packed)))
    except (ValueError, OSError, EOFError) as exc:
        raise ApiError.bad_request(f"status.compressedNodes cannot be decoded: {exc}") from exc
    return decoded if isinstance(decoded, dict) else {}


async def _workflow_replace(
    request: web.Request, member: Member, namespace: str, name: str
) -> web.Response:
    """A PUT of the member's Workflow, as ``argo resume`` writes it (``ResumeWorkflow``,
    ``workflow/util/util.go``: active Suspend nodes set to Succeeded, then ``Update``). The
    object must carry the resourceVersion it was read at (409 Conflict otherwise, as any
    update); the member's controller then goes on past every Suspend node the update marked
    Succeeded. Only that is taken from the body: spec changes made at a member are Karmada's
    to overwrite, and other status edits are ignored here."""
    current = _member_workflow(member, namespace, name)
    run = member.runs.get((namespace, name))
    if current is None or run is None:
        raise ApiError.not_found("argoproj.io", "workflows", name)
    try:
        body = await request.json()
    except ValueError as exc:
        raise ApiError.bad_request(f"the body must be a Workflow: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError.bad_request("the body must be a Workflow")
    version = (body.get("metadata") or {}).get("resourceVersion")
    if str(version) != current["metadata"]["resourceVersion"]:
        raise ApiError.conflict(
            "argoproj.io",
            "workflows",
            name,
            "the object has been modified; please apply your changes to the latest version "
            "and try again",
        )
    before = _nodes(current.get("status"))
    nodes = _nodes(body.get("status"))
    for node_id, node in nodes.items() if isinstance(nodes, dict) else []:
        was = before.get(node_id) or {}
        if (
            isinstance(node, dict)
            and was.get("type") == "Suspend"
            and was.get("phase") == "Running"
            and node.get("phase") == "Succeeded"
        ):
            # The node alone: spec.suspend is Karmada's to propagate, not this update's.
            waiting = run.state.resumes.get(node_id)
            if waiting is not None:
                waiting[0].set()
    member.sb.poke()
    return web.Response(
        text=json.dumps(_member_workflow(member, namespace, name) or current),
        content_type="application/json",
    )
