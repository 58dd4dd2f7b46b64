"""A run read as an OGC API - Processes job: its statusInfo and its results."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet

from portal import presign
from portal.choices import FINAL_UNIT, RunStatus
from portal.karmada import client, errors
from portal.models import UnitRun, WorkflowRun
from portal.ogcapi import processes
from portal.selectors import artifact_stores

log = logging.getLogger(__name__)

# Run status -> OGC status code (statusCode.yaml). A run stopped by any client (this face's
# DELETE, /api/v1/runs/{id}/stop/, the run page) reads as dismissed.
STATUS = {
    RunStatus.PENDING: "accepted",
    RunStatus.RUNNING: "running",
    RunStatus.SUCCEEDED: "successful",
    RunStatus.FAILED: "failed",
    RunStatus.ERROR: "failed",
    RunStatus.STOPPED: "dismissed",
}
RUN_STATUSES: dict[str, list[str]] = {}
for _run, _ogc in STATUS.items():
    RUN_STATUSES.setdefault(_ogc, []).append(str(_run))


def ogc_status(run: WorkflowRun) -> str:
    return STATUS.get(RunStatus(run.status), "failed")


def process_id(run: WorkflowRun) -> str | None:
    """The catalogue template a run was submitted from (``spec.workflowTemplateRef``)."""
    spec = (run.manifest or {}).get("spec") if isinstance(run.manifest, dict) else None
    ref = spec.get("workflowTemplateRef") if isinstance(spec, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    return str(name) if name else None


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _units(run: WorkflowRun) -> list[UnitRun]:
    return list(run.units.order_by("position", "id"))


def with_counts(runs: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
    """Runs with their units counted in the same query, for a list of jobs (a fan-out's
    thousands of units are not read for a list)."""
    return runs.annotate(
        units_total=Count("units", distinct=True),
        units_done=Count("units", filter=Q(units__phase__in=FINAL_UNIT), distinct=True),
    )


def message(run: WorkflowRun, units: list[UnitRun] | None, done: int, total: int) -> str:
    if run.message:
        return run.message
    failed = [u for u in units or [] if u.phase in ("Failed", "Error") and u.message]
    if failed:
        return "; ".join(f"{u.name}: {u.message}" for u in failed[:5])
    return f"{done} of {total} steps done"


def _links(run: WorkflowRun, status: str, base: str, portal: str) -> list[dict[str, str]]:
    """The job's links: itself, the run page, its placement over REST, and its results once
    it has ended."""
    job = f"{base}/jobs/{run.pk}"
    links: list[dict[str, str]] = [
        {"href": job, "rel": "self", "type": "application/json", "title": "this job"},
        {
            "href": f"{portal}/runs/{run.pk}/",
            "rel": "alternate",
            "type": "text/html",
            "title": "the run page: where each step ran and why",
        },
        {
            "href": f"{portal}/api/v1/runs/{run.pk}/",
            "rel": "related",
            "type": "application/json",
            "title": "placement: each unit's site, phase and reason",
        },
        {
            "href": f"{portal}/api/v1/runs/{run.pk}/decisions/",
            "rel": "related",
            "type": "application/json",
            "title": "placement decisions with every candidate site",
        },
    ]
    if status in ("successful", "failed"):
        links.append(
            {
                "href": f"{job}/results",
                "rel": "http://www.opengis.net/def/rel/ogc/1.0/results",
                "type": "application/json",
                "title": "results",
            }
        )
    return links


def status_info(run: WorkflowRun, base: str, portal: str, *, detail: bool = True) -> dict[str, Any]:
    """``base``: the face's root URL (``.../ogcapi``); ``portal``: the site's root. With
    ``detail`` the units are read for the failed steps' messages and the placement; without,
    the run carries its counts (``with_counts``)."""
    units = _units(run) if detail else None
    if units is not None:
        done, total = sum(1 for u in units if u.phase in FINAL_UNIT), len(units)
    else:
        done, total = getattr(run, "units_done", 0), getattr(run, "units_total", 0)
    status = ogc_status(run)
    info: dict[str, Any] = {
        "jobID": str(run.pk),
        "type": "process",
        "status": status,
        "message": message(run, units, done, total),
        "created": _time(run.created_at),
        "started": _time(run.started_at),
        "finished": _time(run.finished_at),
        "updated": _time(run.updated_at),
        "progress": 100 if run.finished_at else int(100 * done / total) if total else 0,
        "links": _links(run, status, base, portal),
    }
    if units is not None:
        info["placement"] = [
            {
                "unit": u.name,
                "site": u.site or None,
                "phase": u.phase,
                "timing": u.timing,
                "reason": u.reason,
            }
            for u in units
        ]
    pid = process_id(run)
    if pid:
        info["processID"] = pid
    return {k: v for k, v in info.items() if v is not None}


def _unit_output(unit: UnitRun, spec: processes.OutputSpec) -> Any:
    outputs = unit.outputs or {}
    if spec.kind == "result":
        return outputs.get("result")
    key = "parameters" if spec.kind == "parameter" else "artifacts"
    for o in outputs.get(key) or []:
        if isinstance(o, dict) and o.get("name") == spec.name:
            return o.get("value") if spec.kind == "parameter" else o
    return None


# The repositories' keys for signing download links, read from their Secrets (cached).
_KEYS = presign.KeyCache(client.secret_data)


def _artifact_link(
    artifact: dict[str, Any], unit: UnitRun, stores: dict[str, Any]
) -> dict[str, Any]:
    """An artifact as a download link: a pre-signed GET for exactly that object, valid an
    hour, never credentials or Secret names. Where it is comes from what Argo
    recorded (``presign.location_of``). A repository whose keys cannot be read now (its
    Secret missing, Karmada unreachable) gives the object's ``s3://`` reference instead, so a
    client still learns where it is."""
    store = stores.get(unit.site) or {}
    where = presign.location_of(artifact, (unit.outputs or {}).get(presign.REPOSITORY_KEY), store)
    archived = "none" not in (artifact.get("archive") or {})
    link = {
        "type": "application/gzip" if archived else "application/octet-stream",
        "title": f"{artifact.get('name')} at {unit.site}",
        "rel": "enclosure",
    }
    if where is None:
        key = str((artifact.get("s3") or {}).get("key") or "")
        return {"href": f"s3:{key}", **link}
    secret = next(
        (
            str(s["credentials_secret"])
            for s in stores.values()
            if s.get("endpoint") == where.endpoint
            and s.get("bucket") == where.bucket
            and s.get("credentials_secret")
        ),
        None,
    )
    if secret is not None:
        try:
            url = presign.presigned_url(
                where, _KEYS.keys(secret), expires=presign.DEFAULT_EXPIRY_SECONDS
            )
            return {"href": url, **link}
        except (KeyError, errors.KarmadaError) as exc:
            log.warning("cannot sign a download link for %s: %s", where.url, exc)
    return {"href": f"s3://{where.bucket}/{where.key}", **link}


def results(run: WorkflowRun) -> dict[str, Any]:
    """Each declared output: a parameter or a step's result as its value, an artifact as a
    link. An output its step did not produce is left out."""
    # The templates as the run was compiled with them: the catalogue entry may have changed.
    compiled = run.compiled or {}
    templates = compiled.get("templates") or {}
    as_run = {
        "spec": {
            "entrypoint": compiled.get("entrypoint"),
            "templates": [{**t, "name": n} for n, t in templates.items() if isinstance(t, dict)],
        }
    }
    specs = processes.output_specs(as_run)
    units = {u.name: u for u in _units(run)}
    single = next(iter(units.values())) if len(units) == 1 else None
    stores = artifact_stores()
    out: dict[str, Any] = {}
    for spec in specs:
        unit = units.get(spec.task) if spec.task else single
        if unit is None:
            continue
        value = _unit_output(unit, spec)
        if value is None:
            continue
        out[spec.id] = _artifact_link(value, unit, stores) if spec.kind == "artifact" else value
    return out
