from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from sites.models import Dataset, Site
from sites.permissions import can_operate_site, can_write_project_data


class CanOperateSite(BasePermission):
    """Every authenticated user reads sites; fleet staff and the site's operators change it."""

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return isinstance(obj, Site) and can_operate_site(request.user, obj)


class CanWriteDataset(BasePermission):
    """Reads are limited by the queryset (invisible is 404); writes need membership of the
    dataset's project (or fleet staff). The project a write *moves to* is checked in the view."""

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return isinstance(obj, Dataset) and can_write_project_data(request.user, obj.project)
