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
