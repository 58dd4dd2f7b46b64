"""A step's logs: which pods an attempt's step workflow ran, and their log read through
Karmada's cluster proxy, bounded in size and time (who may follow one: portal/log_follows.py);
once the step workflow is deleted, the copy the portal kept of it (``portal.karmada.kept_logs``).

Pod names follow Argo (``workflow/util/pod_name.go``, ``GeneratePodName``): with the default
v2 names a pod is ``<workflow>-<template>-<fnv32a(node name)>`` (the workflow's own name for
its root node); with v1 names (annotation ``workflows.argoproj.io/pod-name-format: v1``) it is
the node's id.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from placement.manifests.workflows import step_workflow_name
from portal.choices import FINAL_UNIT
from portal.karmada import client, errors, kept_logs, proxy, resources
from portal.karmada.node_status import NodeStatusUnreadable, nodes_of
from portal.models import UnitRun
from sites.choices import SyncMode
from sites.models import Site

POD_NAME_FORMAT = "workflows.argoproj.io/pod-name-format"
MAX_K8S_NAME = 253
NAMING_HASH_LEN = 10


class LogsNotAvailable(Exception):
    """Why there is no log to show; the message is for the reader."""


class NoProxyPath(LogsNotAvailable):
    """Karmada cannot reach the site's pods at all (no impersonator secret, or the site's API
    endpoint does not answer it): true of every pod of the site, not of one."""


# What karmada-aggregated-apiserver answers (500, reason Unknown) when the cluster proxy has no
# path: `ConnectCluster` (pkg/util/proxy/proxy.go) returns
#   fmt.Errorf("the impersonatorSecretRef of cluster %s is nil", cluster.Name)
# for a cluster registered without one (a pull-mode cluster whose karmada-agent ran with
# `--report-secrets=None`), and the dial error when the cluster's apiEndpoint is unreachable.
NO_IMPERSONATOR = "impersonatorSecretRef of cluster"
UNREACHABLE = ("dial tcp", "i/o timeout", "connection refused", "no such host", "no route to host")


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def argo_pod_name(
    workflow: str, node_name: str, template: str, node_id: str, version: str = "v2"
) -> str:
    """Argo's ``GeneratePodName``."""
    if version == "v1":
        return node_id
    if workflow == node_name:
        return workflow
    prefix = f"{workflow}-{template}" if template else workflow
    limit = MAX_K8S_NAME - NAMING_HASH_LEN - 1
    return f"{prefix[:limit]}-{fnv32a(node_name)}"


# Pod name versions already read, per (site, workflow): a member's controller sets it once,
# when it starts the Workflow, and step workflow names are never reused.
_VERSIONS: OrderedDict[tuple[str, str], str] = OrderedDict()
_VERSIONS_KEPT = 1024


def pod_name_version(site: str, workflow: str) -> str:
    """``GetWorkflowPodNameVersion`` (workflow/util/pod_name.go): the annotation the member's
    Argo controller sets on each Workflow it starts (``setWfPodNamesAnnotation``, from its
    ``POD_NAMES``), read from the member's Workflow through Karmada's cluster proxy, as Karmada
    reflects only the status into the binding. Argo's default, v2, when the annotation is not
    there (yet) or the member cannot be read (the log read then says why)."""
    key = (site, workflow)
    known = _VERSIONS.get(key)  # a web process's threads share it: one lookup, no race
    if known is not None:
        return known
    try:
        wf = proxy.member_workflow_get(site, client.namespace(), workflow)
    except errors.KarmadaError:
        return "v2"
    annotation = ((wf.get("metadata") or {}).get("annotations") or {}).get(POD_NAME_FORMAT)
    if annotation is None:
        return "v2"
    version = "v1" if annotation == "v1" else "v2"
    _VERSIONS[key] = version
    while len(_VERSIONS) > _VERSIONS_KEPT:
        with contextlib.suppress(KeyError):  # another thread trimmed it meanwhile
            _VERSIONS.popitem(last=False)
    return version


@dataclass(frozen=True)
class PodNode:
    pod: str
    node: str  # the node's display name
    template: str
    phase: str


@dataclass(frozen=True)
class AttemptPods:
    site: str
    workflow: str
    phase: str
    pods: tuple[PodNode, ...]
    # The kept record the logs are read from (the step workflow is deleted, or about to be).
    kept: int | None = None


def _member_status(workflow: str) -> Mapping[str, Any] | None:
    """The member Workflow's status as Karmada aggregated it into the ResourceBinding."""
    try:
        binding = client.get(resources.RESOURCE_BINDING, f"{workflow}-workflow")
    except errors.NotFound:
        return None
    aggregated = (binding.get("status") or {}).get("aggregatedStatus") or []
    status = (aggregated[0] or {}).get("status") if aggregated else None
    return status if isinstance(status, Mapping) else None


def member_status(workflow: str) -> Mapping[str, Any] | None:
    """The member Workflow's status (None: its binding is gone). Raises ``KarmadaError``."""
    return _member_status(workflow)


def pods_of(workflow: str, status: Mapping[str, Any], version: str = "v2") -> list[PodNode]:
    """The Pod nodes of a member Workflow's status (``nodes`` or, for a large workflow,
    ``compressedNodes``), named as Argo names their pods under ``version``."""
    try:
        nodes = nodes_of(status)
    except NodeStatusUnreadable as exc:
        raise LogsNotAvailable(f"Logs not available: the step's {exc}.") from exc
    out = []
    for node_id, node in nodes.items() if isinstance(nodes, Mapping) else []:
        if not isinstance(node, Mapping) or node.get("type") != "Pod":
            continue
        name = str(node.get("name") or node_id)
        template = str(node.get("templateName") or "")
        out.append(
            PodNode(
                pod=argo_pod_name(
                    workflow, name, template, str(node.get("id") or node_id), version
                ),
                node=str(node.get("displayName") or name),
                template=template,
                phase=str(node.get("phase") or ""),
            )
        )
    out.sort(key=lambda p: p.node)
    return out


def attempt_workflow(unit: UnitRun, attempt: int) -> str:
    if attempt == unit.attempt and unit.workflow_name:
        return unit.workflow_name
    return step_workflow_name(unit.run.name, unit.slug, attempt)


def attempt_pods(unit: UnitRun, attempt: int, site: str) -> AttemptPods:
    """The pods of one attempt. Raises ``LogsNotAvailable`` saying why there are none."""
    if attempt == unit.attempt and not unit.workflow_name:
        raise LogsNotAvailable("This attempt has no step workflow yet: nothing has run.")
    workflow = attempt_workflow(unit, attempt)
    # Only an ended attempt can have been kept (a running one is read from its site).
    ended = attempt != unit.attempt or unit.phase in FINAL_UNIT
    kept = kept_logs.kept_attempt(unit.pk, attempt) if ended else None
    if kept is not None:
        return _kept_pods(kept, site)
    if not site:
        raise LogsNotAvailable("The step workflow is not placed at a site yet.")
    try:
        status = _member_status(workflow)
    except errors.KarmadaError as exc:
        raise LogsNotAvailable(f"Logs not available: Karmada did not answer ({exc}).") from exc
    if status is None:
        raise LogsNotAvailable(
            f"Logs not available: the step workflow {workflow} is gone from Karmada "
            "(an earlier attempt, or the run was cleaned up)."
        )
    pods = pods_of(workflow, status, pod_name_version(site, workflow))
    return AttemptPods(
        site=site, workflow=workflow, phase=str(status.get("phase") or ""), pods=tuple(pods)
    )


def _kept_pods(kept: Any, site: str) -> AttemptPods:
    pods = [
        PodNode(
            pod=str(p.get("pod") or ""),
            node=str(p.get("node") or ""),
            template=str(p.get("template") or ""),
            phase=str(p.get("phase") or ""),
        )
        for p in kept.pods or []
        if isinstance(p, Mapping)
    ]
    if not pods and kept.note:
        raise LogsNotAvailable(f"Logs not available: {kept.note}")
    return AttemptPods(
        site=kept.site or site,
        workflow=kept.workflow,
        phase=kept.phase,
        pods=tuple(sorted(pods, key=lambda p: p.node)),
        kept=kept.pk,
    )


def log_chunks(
    site: str,
    pod: str,
    *,
    container: str = "main",
    tail: int | None = None,
    follow: bool = False,
    max_bytes: int | None = None,
    max_seconds: float | None = None,
    kept: int | None = None,
) -> Iterator[bytes]:
    """The pod's log in chunks, never more than ``max_bytes`` nor longer than ``max_seconds``
    (following stops there, with a last line saying so); from the kept record ``kept`` when
    given (``AttemptPods.kept``: the step has ended, there is nothing to follow). Raises
    ``LogsNotAvailable``."""
    limit = int(max_bytes if max_bytes is not None else settings.PORTAL_LOG_MAX_BYTES)
    budget = float(max_seconds if max_seconds is not None else settings.PORTAL_LOG_FOLLOW_SECONDS)
    if kept is not None:
        try:
            data = kept_logs.kept_log(kept, pod, container, tail)
        except kept_logs.NotKept as exc:
            raise LogsNotAvailable(str(exc)) from exc
        # Bounded as a read from the site is, so that both give the same text.
        return _bounded(iter([data] if data else []), limit, None)
    try:
        stream = proxy.pod_log(
            site,
            client.namespace(),
            pod,
            container=container,
            tail_lines=tail,
            follow=follow,
            limit_bytes=limit,
            # A follow waits out a silent step for its whole budget; it holds a thread of its
            # own (portal/log_follows.py), not a whole worker.
            read_timeout=budget if follow else 10.0,
        )
    except errors.LogsUnavailable as exc:
        raise LogsNotAvailable(
            f"Logs not available: Karmada's cluster proxy to {site} did not give the pod's log "
            f"({exc.message})."
        ) from exc
    except errors.KarmadaError as exc:
        no_path = _no_proxy_path(site, pod, container, exc)
        if no_path is not None:
            raise no_path from exc
        raise LogsNotAvailable(f"Logs not available: Karmada did not answer ({exc}).") from exc
    return _bounded(stream, limit, budget if follow else None)


def _no_proxy_path(
    site: str, pod: str, container: str, exc: errors.KarmadaError
) -> NoProxyPath | None:
    """Say why Karmada's cluster proxy has no path to the site, and where to read the log
    instead; None when the error is not one of those (Karmada itself did not answer)."""
    if exc.status != 500:
        return None
    if NO_IMPERSONATOR in exc.message:
        why = "Karmada holds no impersonator secret for it, so its cluster proxy cannot reach it"
        if _is_pull_mode(site):
            why += " (its karmada-agent registered it without one: --report-secrets)"
    elif any(marker in exc.message for marker in UNREACHABLE):
        why = "Karmada cannot reach its API endpoint"
        if _is_pull_mode(site):
            why += " (the site connects to Karmada, not the other way round)"
    else:
        return None
    kind = "a pull-mode site" if _is_pull_mode(site) else "a push-mode site"
    return NoProxyPath(
        f"Logs not available here: {site} is {kind} and {why}. Read them on the site: "
        f"kubectl logs -n {client.namespace()} {pod} -c {container} "
        f"(with {site}'s kubeconfig), or the site's Argo UI. Karmada said: {exc.message}"
    )


def _is_pull_mode(site: str) -> bool:
    mode = Site.objects.filter(name=site).values_list("sync_mode", flat=True).first()
    return mode == SyncMode.PULL


def _bounded(stream: Iterator[bytes], limit: int, seconds: float | None) -> Iterator[bytes]:
    deadline = time.monotonic() + seconds if seconds is not None else None
    sent = 0
    try:
        for chunk in stream:
            if sent + len(chunk) > limit:
                yield chunk[: limit - sent]
                yield f"\n[log cut at {limit} bytes]\n".encode()
                return
            sent += len(chunk)
            yield chunk
            if deadline is not None and time.monotonic() > deadline:
                yield b"\n[still running: follow again for more]\n"
                return
    except errors.KarmadaError as exc:
        if deadline is None or "Timeout" not in exc.message:
            yield f"\n[log stream ended: {exc.message}]\n".encode()
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def log_text(site: str, pod: str, **kwargs: Any) -> str:
    """The whole (bounded) log as text, undecodable bytes replaced."""
    return b"".join(log_chunks(site, pod, **kwargs)).decode("utf-8", errors="replace")
