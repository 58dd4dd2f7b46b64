"""Faults injected on demand: what is broken, for how long, and who asks about it."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from sandbox.errors import ApiError

FAULT_TYPES = {
    "site-not-ready": ("site",),
    "site-unreachable": ("site",),
    "api-error": (),
    "api-slow": (),
    "workflow-fail": ("workflow",),
    "template-fail": ("template",),
    # The member's kube-apiserver refuses to create or update the propagated Workflow (its own
    # admission: a policy engine, a quota): Karmada's Work is then not Applied.
    "member-refuse": ("site",),
}


@dataclass
class Fault:
    id: str
    type: str
    site: str | None = None
    workflow: str | None = None
    namespace: str | None = None
    template: str | None = None
    status: int = 500
    delay: float = 2.0
    path: str = "/"
    count: int | None = None
    duration: float | None = None
    message: str = ""
    expires_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if v is not None and k != "expires_at"}
        if self.expires_at is not None:
            d["remainingSeconds"] = round(max(0.0, self.expires_at - time.monotonic()), 3)
        return d


class Faults:
    def __init__(self) -> None:
        self._faults: dict[str, Fault] = {}

    def add(self, spec: dict[str, Any]) -> Fault:
        ftype = spec.get("type")
        if ftype not in FAULT_TYPES:
            raise ApiError.bad_request(
                f"unknown fault type {ftype!r}; one of {', '.join(sorted(FAULT_TYPES))}"
            )
        for required in FAULT_TYPES[ftype]:
            if not spec.get(required):
                raise ApiError.bad_request(f"fault {ftype} needs {required!r}")
        try:
            duration = float(spec["duration"]) if spec.get("duration") is not None else None
            fault = Fault(
                id=str(spec.get("id") or uuid.uuid4().hex[:8]),
                type=str(ftype),
                site=spec.get("site"),
                workflow=spec.get("workflow"),
                namespace=spec.get("namespace"),
                template=spec.get("template"),
                status=int(spec.get("status", 500)),
                delay=float(spec.get("delay", 2.0)),
                path=str(spec.get("path", "/")),
                count=int(spec["count"]) if spec.get("count") is not None else None,
                duration=duration,
                message=str(spec.get("message") or ""),
                expires_at=time.monotonic() + duration if duration is not None else None,
            )
        except (TypeError, ValueError) as exc:
            raise ApiError.bad_request(f"bad fault: {exc}") from exc
        self._faults[fault.id] = fault
        return fault

    def remove(self, fault_id: str) -> bool:
        return self._faults.pop(fault_id, None) is not None

    def clear(self) -> None:
        self._faults.clear()

    def active(self, ftype: str | None = None) -> list[Fault]:
        now = time.monotonic()
        for fid in [
            f.id for f in self._faults.values() if f.expires_at is not None and f.expires_at <= now
        ]:
            del self._faults[fid]
        return [f for f in self._faults.values() if ftype is None or f.type == ftype]

    def site_not_ready(self, site: str) -> bool:
        return any(f.site == site for f in self.active("site-not-ready"))

    def site_unreachable(self, site: str) -> bool:
        return any(f.site == site for f in self.active("site-unreachable"))

    def member_refusal(self, site: str, namespace: str, name: str) -> str | None:
        """The error the member's API answers when Karmada applies the Workflow, or None."""
        for f in self.active("member-refuse"):
            if f.site == site and f.workflow in (None, name) and f.namespace in (None, namespace):
                return f.message or (
                    f'admission webhook "validate.policy.sandbox" denied the request: '
                    f'workflows.argoproj.io "{name}" is refused at {site} (sandbox fault)'
                )
        return None

    def api_fault(self, path: str) -> tuple[int | None, float]:
        """(error status or None, seconds of delay) for one API request."""
        status: int | None = None
        delay = 0.0
        for f in self.active():
            if not path.startswith(f.path):
                continue
            if f.type == "api-slow":
                delay = max(delay, f.delay)
            elif f.type == "api-error" and status is None:
                status = f.status
                if f.count is not None:
                    f.count -= 1
                    if f.count <= 0:
                        self._faults.pop(f.id, None)
        return status, delay

    def workflow_failure(self, namespace: str, name: str) -> str | None:
        for f in self.active("workflow-fail"):
            if f.workflow == name and f.namespace in (None, namespace):
                return f.message or "failed by sandbox fault"
        return None

    def template_failure(self, namespace: str, workflow: str, template: str) -> str | None:
        for f in self.active("template-fail"):
            if (
                f.template == template
                and f.workflow in (None, workflow)
                and f.namespace in (None, namespace)
            ):
                if f.count is not None:  # fails the first ``count`` nodes of the template
                    f.count -= 1
                    if f.count <= 0:
                        self._faults.pop(f.id, None)
                return f.message or f"template {template} failed by sandbox fault"
        return None
