"""Admin clients logged in as an operator and as a superuser."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def operator_admin(client_for, operator: User) -> Client:
    return client_for(operator)


@pytest.fixture
def superuser_admin(client_for, superuser: User) -> Client:
    return client_for(superuser)
