"""Leases (``coordination.k8s.io/v1``) as kube-apiserver takes them.

What the portal's leader election relies on, and so what must fail here as it fails upstream:

* decoding (``k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go``, ``UnmarshalJSON``):
  ``acquireTime`` and ``renewTime`` are MicroTimes, parsed with the layout
  ``2006-01-02T15:04:05.000000Z07:00``, which takes exactly six digits of fraction (a time
  without them, as Python's ``isoformat`` writes at a whole second, does not decode);
  ``leaseDurationSeconds`` and ``leaseTransitions`` are int32. A body that does not decode is
  400 BadRequest.
* validation (``pkg/apis/coordination/validation/validation.go``, ``ValidateLeaseSpec``):
  ``leaseDurationSeconds`` > 0, ``leaseTransitions`` >= 0, ``strategy`` a known or qualified
  name, ``preferredHolder`` only with a ``strategy``: 422 Invalid.
* updates (``pkg/registry/coordination/lease/strategy.go``): ``AllowUnconditionalUpdate`` is
  false, so a PUT without ``metadata.resourceVersion`` is 422 and one with a stale version is
  409 Conflict (``ResourceType.unconditional_update``, checked in the store).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from sandbox.errors import ApiError
from sandbox.resources import LEASE, ResourceType

_MICRO_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})$"
)
_MICRO_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_INT32 = (-(2**31), 2**31 - 1)
# pkg/apis/coordination/validation/validation.go, validLeaseStrategies.
_STRATEGIES = ("OldestEmulationVersion",)
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _undecodable(why: str) -> ApiError:
    return ApiError.bad_request(f'Lease in version "v1" cannot be handled as a Lease: {why}')


def _micro_time(field: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise _undecodable(
            f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
            f"LeaseSpec.spec.{field} of type string"
        )
    match = _MICRO_TIME.match(value)
    bad = f'parsing time "{value}" as "{_MICRO_LAYOUT}": cannot parse "{value}"'
    if match is None:
        raise _undecodable(bad)
    try:
        year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
        dt.datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise _undecodable(f"{bad}: {exc}") from exc


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {json.dumps(value)}"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _int32(field: str, value: Any) -> int | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (_INT32[0] <= value <= _INT32[1])
    ):
        raise _undecodable(
            f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
            f"LeaseSpec.spec.{field} of type int32"
        )
    return int(value)


def _string(field: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _undecodable(
        f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
        f"LeaseSpec.spec.{field} of type string"
    )


def validate(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """Decode and validate a Lease as kube-apiserver does; other kinds pass."""
    if rtype is not LEASE:
        return
    spec = obj.get("spec")
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise _undecodable(
            f"json: cannot unmarshal {_json_kind(spec)} into Go struct field Lease.spec of "
            "type v1.LeaseSpec"
        )
    for field in ("acquireTime", "renewTime"):
        _micro_time(field, spec.get(field))
    duration = _int32("leaseDurationSeconds", spec.get("leaseDurationSeconds"))
    transitions = _int32("leaseTransitions", spec.get("leaseTransitions"))
    _string("holderIdentity", spec.get("holderIdentity"))
    strategy = _string("strategy", spec.get("strategy"))
    preferred = _string("preferredHolder", spec.get("preferredHolder"))
    causes: list[dict[str, str]] = []
    if duration is not None and duration <= 0:
        causes.append(_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    if transitions is not None and transitions < 0:
        causes.append(
            _invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    if strategy is not None and not _strategy_ok(strategy):
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "field": "spec.strategy.strategy",
                "message": f'Unsupported value: "{strategy}": supported values: '
                + ", ".join(f'"{s}"' for s in _STRATEGIES),
            }
        )
    if preferred and not strategy:
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "field": "spec.preferredHolder",
                "message": "Forbidden: may only be specified if `strategy` is defined",
            }
        )
    if causes:
        name = (obj.get("metadata") or {}).get("name", "")
        raise ApiError.invalid(rtype.group, rtype.kind, name, causes)


def _strategy_ok(strategy: str) -> bool:
    if "/" not in strategy:
        return strategy in _STRATEGIES
    return bool(_QUALIFIED.match(strategy)) and len(strategy.split("/", 1)[1]) <= 63


def _invalid(field: str, value: int, why: str) -> dict[str, str]:
    return {
        "reason": "FieldValueInvalid",
        "field": field,
        "message": f"Invalid value: {value}: {why}",
    }
