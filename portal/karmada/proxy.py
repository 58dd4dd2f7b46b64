"""Reads and writes at a member cluster through Karmada's cluster proxy: a pod's log, and a
member's own copy of a Workflow (resume of a suspended node).

Each call has its own timeouts and no retries: a reader waits on the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import urllib3

from portal.karmada import client
from portal.karmada.errors import KarmadaError, LogsUnavailable, TransientError

CLUSTER_PROXY_LOG = (
    "/apis/cluster.karmada.io/v1alpha1/clusters/{site}/proxy"
    "/api/v1/namespaces/{namespace}/pods/{pod}/log"
)
LOG_CONNECT_TIMEOUT = 3.0


def pod_log(
    site: str,
    namespace: str,
    pod: str,
    *,
    container: str = "main",
    tail_lines: int | None = None,
    follow: bool = False,
    limit_bytes: int | None = None,
    read_timeout: float = 10.0,
) -> Iterator[bytes]:
    """The pod's log, read through Karmada's cluster proxy, as chunks of bytes.

    ``follow`` keeps the stream open while the container runs; the caller bounds it (time and
    size) and closes the generator. ``read_timeout`` bounds each wait for the next chunk."""
    query: list[tuple[str, Any]] = [("container", container)]
    if tail_lines is not None:
        query.append(("tailLines", int(tail_lines)))
    if limit_bytes is not None:
        query.append(("limitBytes", int(limit_bytes)))
    if follow:
        query.append(("follow", "true"))
    try:
        response = client.proxy_request(
            CLUSTER_PROXY_LOG,
            "GET",
            {"site": site, "namespace": namespace, "pod": pod},
            query=query,
            headers={"Accept": "text/plain, */*"},
            timeout=(LOG_CONNECT_TIMEOUT, read_timeout),
        )
    except TransientError:
        raise
    except KarmadaError as err:
        raise LogsUnavailable(err.message, err.status, err.reason) from err

    def chunks() -> Iterator[bytes]:
        try:
            yield from response.stream(8192, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise client.translate_errors(exc) from exc
        finally:
            response.release_conn()

    return chunks()


CLUSTER_PROXY_WORKFLOW = (
    "/apis/cluster.karmada.io/v1alpha1/clusters/{site}/proxy"
    "/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows/{name}"
)


def _member_workflow_call(
    method: str, site: str, namespace: str, name: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``method`` on the member's Workflow ``name``, its answer decoded."""
    raw = client.proxy_request(
        CLUSTER_PROXY_WORKFLOW,
        method,
        {"site": site, "namespace": namespace, "name": name},
        headers={"Accept": "application/json", "Content-Type": "application/json"},
        body=body,
    )
    return dict(json.loads(raw.data or b"{}"))


def member_workflow_get(site: str, namespace: str, name: str) -> dict[str, Any]:
    """The Workflow as the member cluster has it (with the status its Argo controller
    writes), read through Karmada's cluster proxy (push-mode sites only)."""
    return _member_workflow_call("GET", site, namespace, name)


def member_workflow_replace(
    site: str, namespace: str, name: str, body: dict[str, Any]
) -> dict[str, Any]:
    """Replace the member's Workflow (``body`` carries the resourceVersion read)."""
    return _member_workflow_call("PUT", site, namespace, name, body)
