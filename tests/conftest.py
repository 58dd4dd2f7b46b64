# Shared fixtures: the personas of the portal and API clients that act as them.
#
# Personas (as healthchecks' ``hc/test.py`` has owner/member/outsider):
#
# * ``operator``: ``is_staff``, in the ``operators`` group, operates ``operated_site`` only.
# * ``scientist``: the owner: member of ``project``, owns the runs the tests make; operates
#   nothing.
# * ``member``: another member of ``project``: sees the scientist's runs, owns none.
# * ``outsider``: authenticated, in no project, operates nothing.
# * ``staff``: fleet staff (``is_staff``, not a scoped operator); sees and edits everything.
# * ``rule_editor``: in the ``rule editors`` group.
#
# ``other_site`` is a site none of them operates. ``client_for(user)`` gives a browser session
# logged in as ``user``. ``api_client`` has no credentials;
# ``api_client_for(user)`` gives a client authenticated with ``Authorization: Token ...``
# (``api_key_for(user)`` the key itself), and
# ``operator_api``, ``scientist_api``, ``outsider_api``, ``staff_api`` are ready-made ones.


import contextlib
import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from django.contrib.auth.models import Group, User
from django.test import Client
from rest_framework.test import APIClient

from portal.api_tokens import api_token_create
from sites.models import Project, Site
from sites.permissions import OPERATORS_GROUP, RULE_EDITORS_GROUP
from tests.factories import ProjectFactory, SiteFactory, UserFactory

# The sandbox fleet over HTTP, the whole stack (worker, watcher) for integration tests, and
# Chromium for the browser tests.
pytest_plugins = ["tests.fixtures_sandbox", "tests.fixtures_stack", "tests.fixtures_browser"]


def _stack_of(item: pytest.Item) -> str:
    """The stack fixture ``item`` runs on ("" for none)."""
    from tests.fixtures_stack import STACK_FIXTURES

    names = getattr(item, "fixturenames", ())
    return next((n for n in names if n in STACK_FIXTURES or n.endswith("_stack")), "")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on a stack run one stack after another, each stack's tests in their order,
    where the first of them was (pytest-django has put the tests that need transactions
    together). A stack's worker and watcher run only while its tests run: module by module, the
    stacks took turns and each turn stopped one worker and watcher and started another
    (restarted 19 times a session); grouped, each starts once, then again only where a test
    stopped one on purpose."""
    on_stack = [(i, _stack_of(item)) for i, item in enumerate(items)]
    stacked = [(i, kind) for i, kind in on_stack if kind]
    if not stacked:
        return
    kinds = list(dict.fromkeys(kind for _, kind in stacked))
    grouped = [items[i] for i, _ in sorted(stacked, key=lambda s: kinds.index(s[1]))]
    first = stacked[0][0]
    rest = [item for (i, kind), item in zip(on_stack, items, strict=True) if not kind]
    items[:] = rest[:first] + grouped + rest[first:]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker) -> Iterator[None]:
    """pytest-django's test database, and at the end no stray session left on it: a process a
    test stopped may still hold a connection for a moment, and PostgreSQL will not drop a
    database in use."""
    yield
    # Imported here: a plugin module imported by conftest loses pytest's assertion rewriting.
    from tests.fixtures_stack import end_other_sessions

    with django_db_blocker.unblock():
        end_other_sessions()


@pytest.fixture(scope="session", autouse=True)
def _fresh_redis() -> None:
    """The test Redis database as new at the start of a session: the test database's ids start
    again at 1 each session, so what an earlier session left keyed by them (a project's advance
    slots, a run's claims) would otherwise be taken for this session's."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(url).flushdb()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    """Every persona has a password; the production hasher would cost most of each test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _own_decision_queue(settings) -> Iterator[None]:
    """Each test queues the webhook's decisions in a list of its own, so what one test leaves
    queued is never written into another test's database."""
    settings.PORTAL_DECISION_QUEUE_KEY = f"test:webhook-decisions:{uuid.uuid4().hex}"
    yield
    from portal.admission import queue, reservations

    if reservations.connected():  # only tests that used the queue
        key = settings.PORTAL_DECISION_QUEUE_KEY
        with contextlib.suppress(Exception):
            client = queue._queue()
            if client is not None:
                client.delete(key, f"{key}:drain-lock")


@pytest.fixture
def operated_site(db) -> Site:
    return SiteFactory(name="site-op", region="eu-west", provider="onprem")


@pytest.fixture
def other_site(db) -> Site:
    return SiteFactory(name="site-other", region="us-east", provider="cloud")


@pytest.fixture
def operator(db, operated_site: Site) -> User:
    user = UserFactory(
        username="operator", is_staff=True, groups=[Group.objects.get(name=OPERATORS_GROUP)]
    )
    operated_site.operators.add(user)
    return user


@pytest.fixture
def project(db) -> Project:
    return ProjectFactory(name="eo")


@pytest.fixture
def scientist(db, project: Project) -> User:
    user = UserFactory(username="scientist")
    project.members.add(user)
    return user


@pytest.fixture
def member(db, project: Project) -> User:
    user = UserFactory(username="member")
    project.members.add(user)
    return user


@pytest.fixture
def outsider(db) -> User:
    return UserFactory(username="outsider")


@pytest.fixture
def staff(db) -> User:
    return UserFactory(username="staff", is_staff=True)


@pytest.fixture
def superuser(db) -> User:
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def rule_editor(db) -> User:
    return UserFactory(username="rule-editor", groups=[Group.objects.get(name=RULE_EDITORS_GROUP)])


@pytest.fixture
def client_for(db) -> Callable[[User], Client]:
    """``client_for(user)``: a browser session logged in as ``user``."""

    def make(user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def api_client() -> APIClient:
    """No credentials at all."""
    return APIClient()


@pytest.fixture
def api_key_for(db) -> Callable[[User], str]:
    """``api_key_for(user)``: the user's API key (made once per test; stored hashed, so the key
    is known only here)."""
    keys: dict[int, str] = {}

    def key(user: User) -> str:
        if user.pk not in keys:
            keys[user.pk] = api_token_create(user=user, replace=True)
        return keys[user.pk]

    return key


@pytest.fixture
def api_client_for(api_key_for) -> Callable[[User], APIClient]:
    def make(user: User) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_for(user)}")
        return client

    return make


@pytest.fixture
def operator_api(api_client_for, operator: User) -> APIClient:
    return api_client_for(operator)


@pytest.fixture
def scientist_api(api_client_for, scientist: User) -> APIClient:
    return api_client_for(scientist)


@pytest.fixture
def outsider_api(api_client_for, outsider: User) -> APIClient:
    return api_client_for(outsider)


@pytest.fixture
def staff_api(api_client_for, staff: User) -> APIClient:
    return api_client_for(staff)
