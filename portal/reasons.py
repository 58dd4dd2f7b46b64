"""A placement reason as its reader needs it.

The planner says how it broke a tie ("tie with site-c, broken by name"): an operator tuning
rules and links wants that; a scientist reads it as the portal choosing at random, and can do
nothing about it. Scientists read that sites fit equally well instead."""

from __future__ import annotations

import re
from typing import Any

from sites.models import Site

TIE_BREAK = re.compile(r"tie with [a-z0-9]([-a-z0-9]*[a-z0-9])?, broken by name")
FOR_SCIENTISTS = "other sites fit equally well"


def sees_tie_breaks(user: Any) -> bool:
    """Staff and the operators of a site; remembered on the user for the request."""
    if not getattr(user, "is_authenticated", False):
        return False
    known = getattr(user, "portal_sees_tie_breaks", None)
    if known is None:
        known = bool(user.is_staff) or Site.objects.filter(operators=user).exists()
        user.portal_sees_tie_breaks = known
    return bool(known)


def reason_for(reason: str, user: Any) -> str:
    if not reason or "broken by name" not in reason or sees_tie_breaks(user):
        return reason
    return TIE_BREAK.sub(FOR_SCIENTISTS, reason)


# Where an answer of the runs API holds placement reasons: a unit's or a decision's `reason`,
# a candidate's `why`, under a run's `units`, a decision's `candidates`, a unit's `decision`.
_REASONS = ("reason", "why")
_HOLDERS = ("units", "candidates", "decision", "results")


def answer_for(data: Any, user: Any) -> Any:
    """An API answer with its tie-breaks as ``reason_for`` words them for ``user`` (changed in
    place: the answer is the view's own). Operators and staff get it as it is."""
    if sees_tie_breaks(user):
        return data
    _rewrite(data)
    return data


def _rewrite(obj: Any) -> None:
    if isinstance(obj, list):
        for item in obj:
            _rewrite(item)
    elif isinstance(obj, dict):
        for key in _REASONS:
            value = obj.get(key)
            if isinstance(value, str) and "broken by name" in value:
                obj[key] = TIE_BREAK.sub(FOR_SCIENTISTS, value)
        for key in _HOLDERS:
            if key in obj:
                _rewrite(obj[key])
