from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from sites.permissions import AnyUser, is_fleet_staff

_ACTIONS = {"POST": "add", "PUT": "change", "PATCH": "change", "DELETE": "delete"}


def can_write_rules(user: AnyUser, action: str = "change") -> bool:
    """Fleet staff, and holders of the rule permission (the ``rule editors`` group), may
    ``action`` (add, change, delete) placement rules."""
    if is_fleet_staff(user):
        return True
    return user.is_authenticated and user.has_perm(f"placement.{action}_placementrule")


class RulesReadOrEdit(BasePermission):
    """Everyone authenticated reads rules (to see why a step went where); editors write."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        if request.method in SAFE_METHODS:
            return True
        return can_write_rules(request.user, _ACTIONS.get(request.method or "", "change"))
