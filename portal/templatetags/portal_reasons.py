from __future__ import annotations

from typing import Any

from django import template

from portal import reasons

register = template.Library()


@register.filter
def reason_for(reason: Any, user: Any) -> str:
    """``{{ decision.reason|reason_for:user }}``: tie-breaks for operators only."""
    return reasons.reason_for(str(reason or ""), user)
