"""The one module that talks to karmada-apiserver (the only importer of ``kubernetes``).

Every call has a timeout, retries transient failures a few times with backoff, and raises one of
the families of ``portal.karmada.errors``. Writes are idempotent: ``delete`` of what is gone is
no error, and ``apply`` creates or brings the portal's own fields in line, writing nothing when
they already match. The informer-like reads (``portal.karmada.lists``) and the cluster proxy
(``portal.karmada.proxy``) call the primitives at the end of this module.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, ParamSpec, TypeVar

import urllib3
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from portal.karmada.errors import (
    AlreadyExists,
    Conflict,
    KarmadaError,
    PermanentError,
    TransientError,
    from_answer,
    unreachable,
)
from portal.karmada.resources import LEASE, Resource
from portal.owned_fields import canonical, covers, three_way

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


def translate_errors(exc: BaseException) -> KarmadaError:
    """The ``portal.karmada.errors`` error ``exc`` means; anything that is not a failure of the
    call (a bug) is raised again as it is."""
    if isinstance(exc, KarmadaError):
        return exc
    if isinstance(exc, ApiException):
        return from_answer(exc.status, exc.reason, exc.body)
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError)):
        return unreachable(exc)
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
        annotations.get(_last_applied_key()) == canonical(body.get("spec"))
        and covers(meta.get("labels") or {}, want.get("labels") or {})
        and covers(annotations, want.get("annotations") or {})
        and covers(current.get("spec"), body.get("spec"))
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
    annotations[_last_applied_key()] = canonical(body.get("spec"))
    meta["labels"] = {**(meta.get("labels") or {}), **(want.get("labels") or {})}
    meta["annotations"] = annotations
    merged = {**current, "metadata": meta}
    if "spec" in body:
        merged["spec"] = three_way(current.get("spec"), last_spec, body["spec"])
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
    annotations[_last_applied_key()] = canonical(body.get("spec"))
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


# --- primitives of the informer-like reads and the cluster proxy ----------------------------


@retrying()
def list_page(
    resource: Resource, ns: str | None, label_selector: str, limit: int, token: str
) -> dict[str, Any]:
    """One page of a list: at most ``limit`` items (all when 0) from the ``continue`` token
    ``token`` (the first page when empty), as the API answered it."""
    kwargs: dict[str, Any] = {"label_selector": label_selector}
    if limit:
        kwargs["limit"] = limit
    if token:
        kwargs["_continue"] = token
    return dict(_call("list", resource, ns, **kwargs))


class _RawWatch(k8s_watch.Watch):
    """A watch whose events keep the object as parsed (``raw_object``, a dict). The client's
    ``Watch`` finds the return type ``object`` in a custom-object call's docstring and then, for
    every event, dumps the parsed object to JSON and parses it again into the same dict: under
    a fan-out (five binding events a step) that was a fifth of the watcher's time."""

    def get_return_type(self, func: Any) -> None:
        return None


def watch_events(
    resource: Resource,
    resource_version: str,
    ns: str | None,
    label_selector: str,
    timeout_seconds: int,
) -> Generator[dict[str, Any], None, None]:
    """The raw events of a watch from ``resource_version`` (``type`` and ``raw_object``, an
    ``ERROR`` event included), until the server ends the stream. No retries: a dropped
    connection is a ``TransientError`` and the caller resumes from the last version seen."""
    api = _custom()
    w = _RawWatch()
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
        yield from w.stream(func, *args, **kwargs)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate_errors(exc) from exc
    finally:
        w.stop()


def proxy_request(
    path: str,
    method: str,
    path_params: dict[str, str],
    *,
    headers: dict[str, str],
    timeout: tuple[float, float] | None = None,
    query: list[tuple[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
) -> urllib3.HTTPResponse:
    """A request to ``path`` on karmada-apiserver with the portal's credentials, answered
    unread (the caller reads or streams the body and releases the connection). No retries:
    the reader waits on the answer. ``timeout`` is ``(connect, read)``, the portal's by
    default."""
    try:
        response: urllib3.HTTPResponse = _api_client().call_api(
            path,
            method,
            path_params=path_params,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=timeout or _timeout(),
        )
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate_errors(exc) from exc
    return response
