"""A unit's step workflow: the Argo Workflow that runs one attempt of it at its site, with the
upstream outputs filled into its arguments and its input artifacts signed."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from placement import codec, manifests
from placement.context import context_annotation
from placement.manifests import GlobalOutputs
from placement.parser import ParsedWorkflow
from portal import folders, labels, presign
from portal.choices import UnitKind
from portal.controller import gates, transfers
from portal.controller.common import SiteState, sites_state
from portal.karmada import client, errors
from portal.models import UnitRun, WorkflowRun
from portal.quotas import selectors as quota_selectors
from portal.selectors import (
    artifact_stores,
    run_global_outputs,
    run_variables_of,
    upstream_outputs,
)

log = logging.getLogger(__name__)


def parsed_of(run: WorkflowRun) -> ParsedWorkflow:
    """The run's parsed workflow as stored at submission (no re-parse, no catalogue lookup)."""
    c = run.compiled
    return ParsedWorkflow(
        name=c.get("name"),
        generate_name=c.get("generate_name"),
        namespace=c.get("namespace"),
        labels=c.get("labels") or {},
        annotations=c.get("annotations") or {},
        arguments=codec.arguments_from_dict(c.get("arguments") or {}),
        entrypoint=c.get("entrypoint") or "",
        on_exit=c.get("on_exit"),
        templates=c.get("templates") or {},
        template_scopes=c.get("template_scopes") or {},
        units=(),
        spec=c.get("spec") or {},
        document={},
    )


@dataclass(frozen=True)
class RunWide:
    """What every step workflow of a run carries from the whole run: ``{{workflow.*}}``
    variables and the global outputs produced so far; and each unit's task by its name (what
    a unit reading through a copy looks its producers up in, ``transfers.outputs_through_copies``:
    indexed once, not for each unit)."""

    variables: dict[str, str]
    global_outputs: GlobalOutputs
    tasks: dict[str, str]


def run_wide_of(run: WorkflowRun, units: Iterable[UnitRun]) -> RunWide:
    units = list(units)
    return RunWide(
        variables=run_variables_of(run, units, namespace=client.namespace()),
        global_outputs=run_global_outputs(run, units),
        tasks={u.name: u.task for u in units},
    )


@dataclass(frozen=True)
class RuntimeInputs:
    """What a runtime unit's placement context reads, when the caller has it at hand: the rows
    of the unit's ancestors (the context reads nothing else of the run) and the sites its
    quotas admitted it for (None: any)."""

    related: list[UnitRun]
    admitted: list[str] | None


def step_workflow_for(
    run: WorkflowRun,
    unit: UnitRun,
    units: Iterable[UnitRun],
    sites: Mapping[str, SiteState] | None = None,
    *,
    outputs: Mapping[str, manifests.TaskOutputs] | None = None,
    run_wide: RunWide | None = None,
    runtime: RuntimeInputs | None = None,
) -> dict[str, Any]:
    """The unit's step workflow; ``outputs`` are ``upstream_outputs(units)`` and ``run_wide``
    ``run_wide_of(run, units)`` when the caller has them already: an advance computes them
    once for all the units it submits (each reads every unit of the run: per unit, that was
    quadratic in a fan-out's size)."""
    # Read more than once below. A list is taken as it is: copying the run's units for each
    # unit made a 50,000-item fan-out's bodies quadratic (2.5 billion references copied).
    units = units if isinstance(units, list) else list(units)
    if run_wide is None:
        run_wide = run_wide_of(run, units)
    outputs = upstream_outputs(units) if outputs is None else outputs
    if transfers.is_transfer(unit):
        body = transfers.workflow(run, unit, units, outputs, folder_at_its_repository)
        signed_inputs(body["spec"], gates.deadline_left(run), unit.site or None)
        return body
    # A producer it reads through a copy (its site cannot read the producer's repository).
    outputs = transfers.outputs_through_copies(unit, run_wide.tasks, outputs, outputs)
    site = unit.site or None
    mirror = None
    if site:
        state = (sites if sites is not None else sites_state()).get(site)
        mirror = state.overrides.get("image_registry_mirror") if state else None
    body = manifests.step_workflow(
        parsed_of(run),
        codec.unit_from_dict(unit.spec),
        run_name=run.name,
        run_id=run.pk,
        attempt=unit.attempt,
        namespace=client.namespace(),
        site=site,
        reason=unit.reason or "placed at runtime",
        workflow_parameters=run.compiled.get("parameters") or {},
        outputs=outputs,
        domain=settings.PORTAL_LABEL_DOMAIN,
        image_mirror=mirror or None,
        run_vars=run_wide.variables,
        globals_=run_wide.global_outputs,
    )
    # The run's deadline, locks and artifact GC are the portal's, not each member's.
    exit_unit = unit.kind == UnitKind.EXIT
    left = None if exit_unit else gates.deadline_left(run)
    body["spec"] = manifests.run_level_spec(body["spec"], deadline_left=left)
    signed_inputs(body["spec"], left, unit.site or None)
    if not site:
        if runtime is None:
            runtime = RuntimeInputs(units, quota_selectors.admitted_sites(unit))
        _placement_context(body, run, unit, runtime)
    if exit_unit:
        _workflow_status(body, str(unit.spec.get("workflow_status", "")))
    return body


def _placement_context(
    body: dict[str, Any], run: WorkflowRun, unit: UnitRun, runtime: RuntimeInputs
) -> None:
    """A runtime unit's step workflow carries what the webhook decides from (its project,
    its ancestors' outputs, the sites its quotas admitted it for)."""
    context = context_annotation(
        project=run.project.name if run.project_id and run.project else None,
        unit_spec=unit.spec,
        units=runtime.related,
        sites=runtime.admitted,
    )
    if context is not None:
        body["metadata"]["annotations"][labels.key(labels.PLACEMENT_CONTEXT)] = context


def _workflow_status(body: dict[str, Any], status: str) -> None:
    """The exit handler's ``{{workflow.status}}`` is the run's: inside the step workflow Argo
    would answer with the step workflow's own status."""
    for key in ("templates", "arguments"):
        if key in body["spec"]:
            text = json.dumps(body["spec"][key]).replace("{{workflow.status}}", status)
            body["spec"][key] = json.loads(text)


# The repositories' keys, read from their Secrets on karmada-apiserver, cached a minute.
_KEYS = presign.KeyCache(client.secret_data)


def signed_inputs(spec: dict[str, Any], deadline_left: float | None, site: str | None) -> None:
    """The step's input artifacts held in a repository of the fleet become pre-signed GETs
    for exactly those objects, valid until the step's deadline (an hour without one): the
    step never holds a repository's keys, whichever site it runs at."""
    arguments = spec.get("arguments")
    if not isinstance(arguments, dict) or not arguments.get("artifacts"):
        return
    if not client.configured():
        # No karmada-apiserver to read the keys from, and none to create the step workflow
        # on: the body is only looked at (a preview of what would be created).
        return
    artifacts = arguments["artifacts"]
    try:
        arguments["artifacts"] = presign.sign_inputs(
            list(artifacts),
            artifact_stores(),
            _KEYS.keys,
            presign.expiry_for(deadline_left),
            site,
        )
    except (KeyError, errors.PermanentError) as exc:
        # The repository's Secret is missing or holds no keys: the step cannot read its input.
        raise CannotSign(f"cannot sign the input artifacts' URLs: {exc}") from exc


def folder_at_its_repository(artifact: Mapping[str, Any]) -> list[str] | None:
    """The objects of the folder an ``archive: none`` output is, listed at the repository of
    the fleet it is in with that repository's keys (``portal/folders.py``); None when it is
    one object or in no repository of the fleet."""
    where = presign.location_of(artifact, None, None)
    store = next(
        (
            s
            for s in artifact_stores().values()
            if where and (s.get("endpoint"), s.get("bucket")) == (where.endpoint, where.bucket)
        ),
        None,
    )
    if where is None or store is None or not store.get("credentials_secret"):
        return None
    if not client.configured():
        return None  # no karmada-apiserver to read the keys from (a preview)
    try:
        keys = _KEYS.keys(str(store["credentials_secret"]))
    except (KeyError, errors.PermanentError) as exc:
        raise CannotSign(f"cannot sign the input artifacts' URLs: {exc}") from exc
    known = (where.endpoint, where.bucket, where.key)
    if known in _FOLDERS:
        return _FOLDERS[known]
    try:
        found = folders.folder_keys(where, keys, store.get("proxy") or None)
    except folders.ListingFailed as exc:
        # Not known, not guessed: read as one object, as before listing existed (a file
        # copies; a folder fails with S3's NoSuchKey, as Argo's load of a missing key does).
        log.warning("cannot tell whether %s is a folder, copied as one object: %s", where.key, exc)
        return None
    if len(_FOLDERS) >= _FOLDERS_KEPT:
        _FOLDERS.pop(next(iter(_FOLDERS)))
    _FOLDERS[known] = found
    return found


# What each output is, by location: a step's outputs never change once it has ended, so each
# is asked of its repository once per process (the advance asks for every reader it routes).
_FOLDERS: dict[tuple[str, str, str], list[str] | None] = {}
_FOLDERS_KEPT = 4096


def folder_or_none(artifact: Mapping[str, Any]) -> list[str] | None:
    """``folder_at_its_repository``, None when the repository's keys cannot be read (the
    reader's own step workflow then says so)."""
    try:
        return folder_at_its_repository(artifact)
    except (CannotSign, errors.KarmadaError):
        # The keys cannot be read now: neither can the reader's URLs be signed, so its step
        # workflow is not made either, and routing it is tried again with it.
        return None


class CannotSign(Exception):
    """The keys of a repository an input is in cannot be read from its Secret."""
