"""The one module that talks to karmada-apiserver (the only importer of ``kubernetes``).

Every call has a timeout, retries transient failures a few times with backoff, and raises one of
two error families: ``TransientError`` (the API was unreachable, slow, overloaded or answered
5xx/429: try again later — Celery tasks ``autoretry_for`` it) or ``PermanentError`` (the API
refused the request: the unit fails with the API's message). ``NotFound``, ``AlreadyExists`` and
``Conflict`` are permanent errors that callers handle to stay idempotent.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import urllib3
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from portal.owned_fields import canonical as _canonical
from portal.owned_fields import covers as _covers
from portal.owned_fields import three_way as _three_way

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool


CLUSTER = Resource("cluster.karmada.io", "v1alpha1", "clusters", "Cluster", False)
PROPAGATION_POLICY = Resource(
    "policy.karmada.io", "v1alpha1", "propagationpolicies", "PropagationPolicy", True
)
CLUSTER_PROPAGATION_POLICY = Resource(
    "policy.karmada.io", "v1alpha1", "clusterpropagationpolicies", "ClusterPropagationPolicy", False
)
OVERRIDE_POLICY = Resource(
    "policy.karmada.io", "v1alpha1", "overridepolicies", "OverridePolicy", True
)
RESOURCE_BINDING = Resource(
    "work.karmada.io", "v1alpha2", "resourcebindings", "ResourceBinding", True
)
WORKFLOW = Resource("argoproj.io", "v1alpha1", "workflows", "Workflow", True)
# The watcher's and beat's leader election (portal/leader.py).
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
BY_KIND = {
    r.kind: r
    for r in (
        CLUSTER,
        PROPAGATION_POLICY,
        CLUSTER_PROPAGATION_POLICY,
        OVERRIDE_POLICY,
        RESOURCE_BINDING,
        WORKFLOW,
    )
}


class KarmadaError(Exception):
    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class TransientError(KarmadaError):
    """Unreachable, timed out, 5xx or 429: the same call may succeed later."""


class PermanentError(KarmadaError):
    """The API refused the request; repeating it will not help."""


class NotFound(PermanentError):
    pass


class AlreadyExists(PermanentError):
    pass


class Conflict(PermanentError):
    pass


class Expired(PermanentError):
    """A watch's resourceVersion is too old (410): list again."""


class Forbidden(PermanentError):
    """RBAC refused the call (403): the portal's identity lacks a grant, on karmada-apiserver
    or, through the cluster proxy, at the site. The message names the verb and resource."""


# kube-apiserver's forbidden message (apiserver responsewriters/errors.go, forbiddenMessage).
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) (?:resource "(?P<resource>[^"]*)" in API '
    r'group "(?P<group>[^"]*)"(?: in the namespace "(?P<ns>[^"]*)")?|path "(?P<path>[^"]*)")'
)


def forbidden_text(message: str, name: str = "") -> str:
    """A 403's message as the portal says it: who may not do what, where, then Karmada's own
    words. Through the cluster proxy a site may also refuse to let Karmada act as the portal
    (``impersonate``): that is said so."""
    found = _FORBIDDEN.search(message)
    if found is None:
        return f"the portal's identity may not do this: {message}"
    if found["path"] is not None:
        what = f"path {found['path']}"
    else:
        what = found["resource"] + (f' "{name}"' if name else "")
        if found["group"]:
            what += f" (API group {found['group']})"
        what += f" in namespace {found['ns']}" if found["ns"] else " at the cluster scope"
    if found["verb"] == "impersonate":
        return (
            "the site does not let Karmada's cluster proxy act as the portal's identity: "
            f"{found['user']} may not impersonate {what} (Karmada said: {message})"
        )
    return (
        f"the portal's identity ({found['user']}) may not {found['verb']} {what}"
        f" (Karmada said: {message})"
    )


def _from_api_exception(exc: ApiException) -> KarmadaError:
    status = exc.status or 0
    reason, message, name = "", exc.reason or "", ""
    try:
        body = json.loads(exc.body or "{}")
        reason = body.get("reason", "") or ""
        message = body.get("message", "") or message
        name = str((body.get("details") or {}).get("name") or "")
    except (ValueError, TypeError, AttributeError):
        pass
    text = f"{status} {reason or exc.reason}: {message}".strip()
    if status == 403:
        return Forbidden(forbidden_text(message, name), status, reason)
    if status == 404:
        return NotFound(text, status, reason)
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(text, status, reason)
    if status == 409:
        return Conflict(text, status, reason)
    if status == 410:
        return Expired(text, status, reason)
    if status == 429 or status >= 500 or status == 0:
        return TransientError(text, status, reason)
    return PermanentError(text, status, reason)


def translate_errors(exc: BaseException) -> KarmadaError:
    if isinstance(exc, KarmadaError):
        return exc
    if isinstance(exc, ApiException):
        return _from_api_exception(exc)
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError)):
        return TransientError(f"Karmada unreachable: {exc.__class__.__name__}: {exc}")
    raise exc


def retrying(
    attempts: int = 3, base_delay: float = 0.2
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Retry transient failures in-process with jittered exponential backoff, then give up
    with ``TransientError`` so the caller (a Celery task) can back off for longer."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            for attempt in range(1, attempts + 1):
                try:
                    return fn(*args, **kwargs)
                except Exception as exc:  # sorted by translate_errors
                    err = translate_errors(exc)
                    if not isinstance(err, TransientError) or attempt == attempts:
                        raise err from exc
                    delay = base_delay * (2 ** (attempt - 1)) * (0.5 + random.random())
                    log.info("%s: %s; retrying in %.2fs", fn.__name__, err.message, delay)
                    time.sleep(delay)
            raise AssertionError("unreachable")

        return wrapper

    return decorate


_local = threading.local()
_config_lock = threading.Lock()
_configuration: k8s.Configuration | None = None


def configured() -> bool:
    return bool(settings.KARMADA_KUBECONFIG or settings.KARMADA_IN_CLUSTER)


def _load_configuration() -> k8s.Configuration:
    global _configuration
    with _config_lock:
        if _configuration is None:
            cfg = k8s.Configuration()
            if settings.KARMADA_IN_CLUSTER:
                k8s_config.load_incluster_config(client_configuration=cfg)
            elif settings.KARMADA_KUBECONFIG:
                k8s_config.load_kube_config(
                    config_file=settings.KARMADA_KUBECONFIG, client_configuration=cfg
                )
            else:
                raise PermanentError("Karmada is not configured: set KARMADA_KUBECONFIG")
            # We retry ourselves (with backoff and error sorting); urllib3's own retries would
            # multiply the time a dead API server holds a worker.
            cfg.retries = False
            _configuration = cfg
        return _configuration


def reset() -> None:
    """Forget the configuration and clients (tests point the portal at a new sandbox)."""
    global _configuration
    with _config_lock:
        _configuration = None
    _local.__dict__.clear()


def _api_client() -> k8s.ApiClient:
    # One ApiClient per thread: it owns a urllib3 pool and a thread pool of its own.
    cfg = _load_configuration()
    api = getattr(_local, "api", None)
    if api is None or getattr(_local, "cfg", None) is not cfg:
        api = k8s.ApiClient(configuration=cfg)
        _local.api, _local.cfg = api, cfg
    return api


def _custom() -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(_api_client())


def _timeout(read: float | None = None) -> tuple[float, float]:
    """``(connect, read)`` seconds for one Karmada call.

    The ``kubernetes`` client honours only an ``int`` (a total) or a ``(connect, read)`` tuple
    as ``_request_timeout``; a float is silently dropped (``rest.py``) and the call then waits
    for as long as the server keeps the connection open. So every call passes this tuple."""
    read_s = float(settings.KARMADA_REQUEST_TIMEOUT if read is None else read)
    connect_s = min(float(settings.KARMADA_CONNECT_TIMEOUT), read_s)
    return (connect_s, read_s)


def namespace() -> str:
    return str(settings.KARMADA_NAMESPACE)


# --- typed calls ----------------------------------------------------------------------------


@retrying()
def ping() -> str:
    version = k8s.VersionApi(_api_client()).get_code(
        _request_timeout=_timeout(read=min(float(settings.KARMADA_REQUEST_TIMEOUT), 3.0))
    )
    return str(version.git_version)


@retrying()
def ensure_namespace(name: str) -> None:
    core = k8s.CoreV1Api(_api_client())
    try:
        core.read_namespace(name, _request_timeout=_timeout())
    except ApiException as exc:
        if exc.status != 404:
            raise
        try:
            core.create_namespace({"metadata": {"name": name}}, _request_timeout=_timeout())
        except ApiException as create_exc:
            if create_exc.status != 409:
                raise


@retrying()
def config_map_data(name: str, ns: str | None = None) -> dict[str, str]:
    """A ConfigMap's data on karmada-apiserver (semaphore limits: ``execution.locks``)."""
    core = k8s.CoreV1Api(_api_client())
    found = core.read_namespaced_config_map(name, ns or namespace(), _request_timeout=_timeout())
    return dict(found.data or {})


@retrying()
def secret_data(name: str, ns: str | None = None) -> dict[str, str]:
    """A Secret's data on karmada-apiserver, decoded: a site's artifact repository keys, which
    the portal signs pre-signed URLs with (``portal/presign.py``) and never passes on. Needs
    ``get`` on ``secrets`` in the portal's namespace (``deploy/karmada/rbac.yaml``)."""
    core = k8s.CoreV1Api(_api_client())
    found = core.read_namespaced_secret(name, ns or namespace(), _request_timeout=_timeout())
    data = {k: base64.b64decode(v).decode() for k, v in (found.data or {}).items()}
    # A Secret written with stringData and read back from a server that did not fold it
    # into data (the sandbox folds it; real Kubernetes always does).
    data.update({k: str(v) for k, v in (found.string_data or {}).items()})
    return data


def _call(verb: str, resource: Resource, ns: str | None, *args: Any, **kwargs: Any) -> Any:
    """``<verb>_namespaced_custom_object`` or ``<verb>_cluster_custom_object``, as the
    resource's scope says, with the portal's timeout."""
    api = _custom()
    kwargs.setdefault("_request_timeout", _timeout())
    if resource.namespaced:
        fn = getattr(api, f"{verb}_namespaced_custom_object")
        return fn(
            resource.group, resource.version, ns or namespace(), resource.plural, *args, **kwargs
        )
    fn = getattr(api, f"{verb}_cluster_custom_object")
    return fn(resource.group, resource.version, resource.plural, *args, **kwargs)


@retrying()
def get(resource: Resource, name: str, ns: str | None = None) -> dict[str, Any]:
    return dict(_call("get", resource, ns, name))


# Items per chunk of a list: client-go's pager's default (``tools/pager``, defaultPageSize).
# A list of 20,000 ResourceBindings in one answer held a few hundred MB in the worker for
# every resync; in chunks it holds one chunk at a time.
LIST_CHUNK = 500


def list_objects(
    resource: Resource, ns: str | None = None, label_selector: str = ""
) -> tuple[list[dict[str, Any]], str]:
    """Items and the list's resourceVersion (to start a watch from). For lists that stay
    small (Clusters, policies); one that grows with the runs is read with ``list_chunks``."""
    items: list[dict[str, Any]] = []
    rv = ""
    for chunk, chunk_rv in list_chunks(resource, ns, label_selector):
        items.extend(chunk)
        rv = chunk_rv
    return items, rv


def list_chunks(
    resource: Resource, ns: str | None = None, label_selector: str = "", limit: int | None = None
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """A list in chunks of ``limit`` items (``limit`` and ``continue``), each with the list's
    resourceVersion. A chunk's call is retried as any other. When Karmada has compacted
    past the list (410 Expired on a continue), the list starts over, as client-go's pager
    does with ``FullListIfExpired`` (whole this time: the next chunks would expire alike);
    callers fold chunks idempotently, so chunks seen twice do no harm."""
    token = ""
    limit = LIST_CHUNK if limit is None else limit
    while True:
        try:
            out = _list_chunk(resource, ns, label_selector, limit, token)
        except Expired:
            if not token:
                raise
            log.info("%s: the list's continue token expired; listing again, whole", resource.kind)
            token, limit = "", 0
            continue
        meta = out.get("metadata") or {}
        yield list(out.get("items") or []), str(meta.get("resourceVersion", ""))
        token = str(meta.get("continue") or "")
        if not token:
            return


@retrying()
def _list_chunk(
    resource: Resource, ns: str | None, label_selector: str, limit: int, token: str
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"label_selector": label_selector}
    if limit:
        kwargs["limit"] = limit
    if token:
        kwargs["_continue"] = token
    return dict(_call("list", resource, ns, **kwargs))


@retrying()
def create(resource: Resource, body: dict[str, Any], ns: str | None = None) -> dict[str, Any]:
    return dict(_call("create", resource, ns, body))


@retrying()
def patch(
    resource: Resource, name: str, body: dict[str, Any], ns: str | None = None
) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386)."""
    return dict(_call("patch", resource, ns, name, body))


@retrying()
def replace(
    resource: Resource, name: str, body: dict[str, Any], ns: str | None = None
) -> dict[str, Any]:
    return dict(_call("replace", resource, ns, name, body))


@retrying()
def delete(resource: Resource, name: str, ns: str | None = None) -> bool:
    """Delete; ``False`` when it was already gone (deleting twice is fine)."""
    try:
        _call("delete", resource, ns, name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


# The portal's own fields of an object it applies: the last spec it wrote, as kubectl keeps its
# last-applied-configuration, so a field the portal stops writing is removed while a field
# Karmada's webhooks or CRD defaults added (and the portal never wrote) is kept.
LAST_APPLIED = "last-applied-spec"


def _last_applied_key() -> str:
    return f"{settings.PORTAL_LABEL_DOMAIN}/{LAST_APPLIED}"


def owned_in_step(current: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the fields the portal owns in ``current`` are those of ``body``: its labels, its
    annotations and its spec, compared with what it last wrote."""
    meta, want = current.get("metadata", {}), body.get("metadata", {})
    annotations = meta.get("annotations") or {}
    return (
        annotations.get(_last_applied_key()) == _canonical(body.get("spec"))
        and _covers(meta.get("labels") or {}, want.get("labels") or {})
        and _covers(annotations, want.get("annotations") or {})
        and _covers(current.get("spec"), body.get("spec"))
    )


def owned_merge(current: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """``current`` with the portal's fields from ``body``: every other label (Karmada's
    permanent-id), annotation, finalizer and defaulted field stays as Karmada keeps it, since its
    validating webhook refuses an update that drops the permanent-id label."""
    meta, want = dict(current.get("metadata", {})), body.get("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    last = annotations.get(_last_applied_key())
    try:
        last_spec = json.loads(last) if last else None
    except ValueError:
        last_spec = None
    annotations.update(want.get("annotations") or {})
    annotations[_last_applied_key()] = _canonical(body.get("spec"))
    meta["labels"] = {**(meta.get("labels") or {}), **(want.get("labels") or {})}
    meta["annotations"] = annotations
    merged = {**current, "metadata": meta}
    if "spec" in body:
        merged["spec"] = _three_way(current.get("spec"), last_spec, body["spec"])
    merged.pop("status", None)
    return merged


def apply(resource: Resource, body: dict[str, Any], ns: str | None = None) -> dict[str, Any]:
    """Create the object, or bring the fields the portal owns in line with ``body``, keeping
    what Karmada added (a read-modify-write with the object's resourceVersion; see
    ``owned_merge``), and writing nothing when they already match. Several processes may apply
    the same object at once: a Conflict means another won, so read again and retry."""
    name = body["metadata"]["name"]
    meta = body.get("metadata", {})
    annotations = {**(meta.get("annotations") or {})}
    annotations[_last_applied_key()] = _canonical(body.get("spec"))
    try:
        return create(resource, {**body, "metadata": {**meta, "annotations": annotations}}, ns)
    except AlreadyExists:
        pass
    for attempt in range(5):
        current = get(resource, name, ns)
        if owned_in_step(current, body):
            return current
        try:
            return replace(resource, name, owned_merge(current, body), ns)
        except Conflict:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def watch(
    resource: Resource,
    resource_version: str,
    ns: str | None = None,
    label_selector: str = "",
    timeout_seconds: int = 300,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(type, object)`` from ``resource_version`` until the server ends the stream.

    Raises ``Expired`` when the version is too old (list again) and ``TransientError`` when the
    connection drops (resume from the last version seen).
    """
    api = _custom()
    w = k8s_watch.Watch()
    kwargs: dict[str, Any] = {
        "resource_version": resource_version,
        "timeout_seconds": timeout_seconds,
        "allow_watch_bookmarks": True,
        "label_selector": label_selector,
        "_request_timeout": (_timeout()[0], timeout_seconds + 30),
    }
    scope = "namespaced" if resource.namespaced else "cluster"
    func: Any = getattr(api, f"list_{scope}_custom_object")
    args: tuple[Any, ...] = (resource.group, resource.version)
    args += (ns or namespace(), resource.plural) if resource.namespaced else (resource.plural,)
    try:
        for event in w.stream(func, *args, **kwargs):
            kind = event.get("type", "")
            obj = event.get("raw_object") or event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code") if isinstance(obj, dict) else None
                if code == 410:
                    raise Expired("watch expired: " + str(obj.get("message", "")), 410, "Expired")
                raise TransientError(f"watch error: {obj}")
            yield kind, obj
    except ApiException as exc:
        raise translate_errors(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate_errors(exc) from exc
    finally:
        w.stop()


# --- leases (leader election) ---------------------------------------------------------------
# No retries here: the election tries again every retry period, and each call is bounded by
# the time its caller may still wait (a leader's renew deadline), as client-go's context is.


def _lease_call(verb: str, *args: Any, timeout: float) -> dict[str, Any]:
    read = max(0.05, min(float(settings.KARMADA_REQUEST_TIMEOUT), timeout))
    try:
        return dict(_call(verb, LEASE, None, *args, _request_timeout=_timeout(read=read)))
    except Exception as exc:  # sorted by translate_errors
        raise translate_errors(exc) from exc


def lease_get(name: str, *, timeout: float) -> dict[str, Any]:
    """The Lease ``name`` in the portal's namespace (``NotFound`` when there is none)."""
    return _lease_call("get", name, timeout=timeout)


def lease_create(body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    return _lease_call("create", body, timeout=timeout)


def lease_update(body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Replace the Lease; ``body`` carries the resourceVersion it was read at, so a write
    racing another candidate's is a ``Conflict`` (kube-apiserver allows no other kind)."""
    return _lease_call("replace", body["metadata"]["name"], body, timeout=timeout)


# --- webhook registration -------------------------------------------------------------------


@retrying()
def apply_mutating_webhook(body: dict[str, Any]) -> None:
    """Create or update the webhook configuration; unchanged means no write, and a Conflict
    (another process applied it meanwhile) means read again and retry."""
    api = k8s.AdmissionregistrationV1Api(_api_client())
    name = body["metadata"]["name"]
    try:
        api.create_mutating_webhook_configuration(body, _request_timeout=_timeout())
        return
    except ApiException as exc:
        if exc.status != 409:
            raise
    for attempt in range(5):
        # Raw JSON: the typed model refuses objects another client left half-filled.
        raw = api.read_mutating_webhook_configuration(
            name, _request_timeout=_timeout(), _preload_content=False
        )
        current = json.loads(raw.data)
        if current.get("webhooks") == body.get("webhooks"):
            return
        meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        try:
            api.replace_mutating_webhook_configuration(
                name, {**body, "metadata": meta}, _request_timeout=_timeout()
            )
            return
        except ApiException as exc:
            if exc.status != 409 or attempt == 4:
                raise


# --- pod logs through Karmada's cluster proxy -----------------------------------------------
# Self-contained on purpose: its own timeouts and no retries (a reader waits on the answer).

CLUSTER_PROXY_LOG = (
    "/apis/cluster.karmada.io/v1alpha1/clusters/{site}/proxy"
    "/api/v1/namespaces/{namespace}/pods/{pod}/log"
)
LOG_CONNECT_TIMEOUT = 3.0


class LogsUnavailable(PermanentError):
    """Karmada's cluster proxy refused the read for good: the pod is gone, or the member
    refused. (No path to the site at all is a 500 from Karmada: see ``portal.logs``.)"""


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
        response = _api_client().call_api(
            CLUSTER_PROXY_LOG,
            "GET",
            path_params={"site": site, "namespace": namespace, "pod": pod},
            query_params=query,
            header_params={"Accept": "text/plain, */*"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=(LOG_CONNECT_TIMEOUT, read_timeout),
        )
    except ApiException as exc:
        err = translate_errors(exc)
        if isinstance(err, TransientError):
            raise err from exc
        raise LogsUnavailable(err.message, err.status, err.reason) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate_errors(exc) from exc

    def chunks() -> Iterator[bytes]:
        try:
            yield from response.stream(8192, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate_errors(exc) from exc
        finally:
            response.release_conn()

    return chunks()


# --- a member's Workflow through Karmada's cluster proxy (resume of a suspended node) -------

CLUSTER_PROXY_WORKFLOW = (
    "/apis/cluster.karmada.io/v1alpha1/clusters/{site}/proxy"
    "/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows/{name}"
)


def _member_workflow_call(
    method: str, site: str, namespace: str, name: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    try:
        raw = _api_client().call_api(
            CLUSTER_PROXY_WORKFLOW,
            method,
            path_params={"site": site, "namespace": namespace, "name": name},
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=_timeout(),  # (connect, read): a nested tuple was refused
        )
    except ApiException as exc:
        raise translate_errors(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate_errors(exc) from exc
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
