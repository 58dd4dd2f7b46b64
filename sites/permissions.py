"""Who may do what with the inventory; shared by the REST API and the admin.

Roles, decided once here so the API and the admin agree:

* **Fleet staff**: superusers, and ``is_staff`` users who are *not* in the ``operators`` group.
  They see and edit everything.
* **Scoped operators**: members of the ``operators`` group (they are ``is_staff`` so that they
  can log in to the admin). They act only on the sites they operate (``Site.operators``); being
  in the group is what scopes them, so a superuser in the group is still fleet staff.
* **Rule editors**: members of the ``rule editors`` group; besides fleet staff they write
  placement rules (``placement.api.permissions``).
* Everybody else who is authenticated (scientists) reads sites and rules, and reads and writes
  the datasets of their projects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

    from sites.models import Project, Site

    AnyUser = User | AnonymousUser
else:
    AnyUser = Any

OPERATORS_GROUP = "operators"
RULE_EDITORS_GROUP = "rule editors"


def is_scoped_operator(user: AnyUser) -> bool:
    """A member of the operators group who is not a superuser: limited to their own sites."""
    if not user.is_authenticated or user.is_superuser:
        return False
    return user.groups.filter(name=OPERATORS_GROUP).exists()


def is_fleet_staff(user: AnyUser) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return bool(user.is_staff) and not is_scoped_operator(user)


def can_operate_site(user: AnyUser, site: Site) -> bool:
    """May change the operator fields of ``site`` (cordon, labels, overrides)."""
    if is_fleet_staff(user):
        return True
    if not user.is_authenticated:
        return False
    return site.operators.filter(pk=user.pk).exists()


def can_write_project_data(user: AnyUser, project: Project | None) -> bool:
    """May create, change or delete datasets of ``project`` (``None``: fleet-wide datasets)."""
    if is_fleet_staff(user):
        return True
    if project is None or not user.is_authenticated:
        return False
    return project.members.filter(pk=user.pk).exists()
