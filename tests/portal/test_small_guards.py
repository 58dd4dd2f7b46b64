"""Small guards, over HTTP against the live server as an ordinary project member: NUL
characters anywhere a client can put them, a dataset PATCH with an empty replica, a stranger's
failed logins, the demo's SQLite file mode, and API keys stored hashed and shown once."""

from __future__ import annotations

import http.client
import io
import json
import re
import stat
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection

from portal import throttling
from portal.models import ApiToken, WorkflowRun
from sites.models import DatasetReplica
from tests.factories import DatasetFactory, SiteFactory
from tests.fixtures_sandbox import SandboxServer
from tests.portal.helpers import make_run

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "metadata": {"generateName": "nul-"},
    "spec": {
        "entrypoint": "main",
        "templates": [{"name": "main", "container": {"image": "busybox", "command": ["echo"]}}],
    },
}


@dataclass
class Answer:
    status: int
    body: bytes
    headers: http.client.HTTPMessage

    def json(self) -> Any:
        return json.loads(self.body)


class Http:
    """Raw HTTP to the live server (bytes in the path go as sent), from a chosen loopback
    address, so that two clients are two addresses to the portal."""

    def __init__(self, url: str, source: str = "127.0.0.1") -> None:
        parts = urlsplit(url)
        self.host = "127.0.0.1" if parts.hostname == "localhost" else str(parts.hostname)
        self.port = int(parts.port or 80)
        self.source = source
        self.cookies: dict[str, str] = {}

    def send(self, method: str, path: str, body: bytes | None = None, **headers: str) -> Answer:
        conn = http.client.HTTPConnection(
            self.host, self.port, timeout=30, source_address=(self.source, 0)
        )
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        conn.request(method, path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        for header in answer.headers.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            self.cookies[name] = rest.split(";", 1)[0]
        return Answer(answer.status, data, answer.headers)

    def api(self, method: str, path: str, key: str, data: Any = None) -> Answer:
        body = json.dumps(data).encode() if data is not None else None
        return self.send(
            method,
            path,
            body,
            Authorization=f"Token {key}",
            **({"Content-Type": "application/json"} if body is not None else {}),
        )

    def login(self, username: str, password: str) -> int:
        page = self.send("GET", "/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        assert token, page.body[:300]
        form = {
            "csrfmiddlewaretoken": token.group(1).decode(),
            "username": username,
            "password": password,
        }
        answer = self.send(
            "POST",
            "/login/",
            urlencode(form).encode(),
            **{"Content-Type": "application/x-www-form-urlencoded", "Referer": "http://x/"},
        )
        return answer.status


@pytest.fixture
def web(live_server: Any) -> Http:
    return Http(live_server.url)


# --- NUL characters -----------------------------------------------------------------------------


def test_a_nul_in_the_path_is_404_never_500(
    web: Http, scientist: User, project: Any, api_key_for: Any
) -> None:
    run = make_run(scientist, project=project)
    key = api_key_for(scientist)
    for path in (
        f"/api/v1/runs/{run.pk}%00/",
        f"/api/v1/runs/{run.pk}/units/ingest%00/",
        f"/api/v1/runs/{run.pk}/units/in%00gest/logs/",
        "/api/v1/sites/site%00-a/",
        "/api/v1/datasets/%00/",
        f"/runs/{run.pk}/units/ingest%00/",
        "/%00",
    ):
        answer = web.api("GET", path, key)
        assert answer.status == 404, (path, answer.status, answer.body[:200])


def test_a_nul_in_a_query_parameter_or_form_field_is_400_naming_it(
    web: Http, scientist: User, project: Any, api_key_for: Any
) -> None:
    key = api_key_for(scientist)
    for query, name in (("status=%00", "status"), ("site=a%00", "site"), ("x%00=1", "x\\u0000")):
        answer = web.api("GET", f"/api/v1/runs/?{query}", key)
        assert answer.status == 400, (query, answer.status)
        assert answer.json()["errors"][0]["path"] == name
        assert "NUL" in answer.json()["errors"][0]["message"]
    form = urlencode({"username": "a\x00b", "password": "x"}).encode()
    answer = web.send(
        "POST", "/login/", form, **{"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert answer.status == 400 and answer.json()["errors"][0]["path"] == "username"


def test_a_nul_in_a_body_field_is_400_naming_it_and_nothing_is_stored(
    web: Http, scientist: User, project: Any, api_key_for: Any
) -> None:
    key = api_key_for(scientist)
    site = SiteFactory(name="site-n")
    dataset = DatasetFactory(name="nul-data", project=project)
    answer = web.api(
        "POST",
        "/api/v1/datasets/",
        key,
        {"name": "d\x00", "project": project.name, "uri_prefix": "s3://x/"},
    )
    assert answer.status == 400 and answer.json()["errors"][0]["path"] == "name"
    answer = web.api(
        "PATCH",
        f"/api/v1/datasets/{dataset.pk}/",
        key,
        {"replicas": [{"site": site.name, "uri": "s3://x\x00"}]},
    )
    assert answer.status == 400
    assert answer.json()["errors"][0]["path"] == "replicas[0].uri"
    assert not DatasetReplica.objects.filter(dataset=dataset).exists()

    workflow = json.loads(json.dumps(WORKFLOW))
    workflow["metadata"]["annotations"] = {"note": "a\x00b"}
    workflow["spec"]["templates"][0]["container"]["command"] = ["echo", "\x00"]
    for path in (f"/api/v1/runs/?project={project.name}", "/api/v1/runs/preview/"):
        answer = web.api("POST", path, key, workflow)
        assert answer.status == 400, (path, answer.status, answer.body[:300])
        paths = {e["path"] for e in answer.json()["errors"]}
        assert "metadata.annotations.note" in paths, paths
        assert "spec.templates[0].container.command[1]" in paths, paths
    # YAML's own escapes decode to NUL too.
    yaml_body = (
        b"apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: nul-}\n"
        b'spec:\n  entrypoint: main\n  templates:\n  - name: "ma\\0in"\n'
        b"    container: {image: busybox}\n"
    )
    answer = web.send(
        "POST",
        f"/api/v1/runs/?project={project.name}",
        yaml_body,
        Authorization=f"Token {key}",
        **{"Content-Type": "application/yaml"},
    )
    assert answer.status == 400
    assert answer.json()["errors"][0]["path"] == "spec.templates[0].name"
    assert not WorkflowRun.objects.filter(project=project).exists()


# --- dataset PATCH with an empty replica ---------------------------------------------------------


def test_a_dataset_patch_with_an_empty_replica_is_400_naming_the_field(
    web: Http, scientist: User, project: Any, api_key_for: Any
) -> None:
    key = api_key_for(scientist)
    site = SiteFactory(name="site-r")
    dataset = DatasetFactory(name="replicated", project=project)
    DatasetReplica.objects.create(dataset=dataset, site=site, uri="s3://kept/")
    for replicas, path in (
        ([{}], "replicas[0].site"),
        ([{"site": site.name}, {"uri": "s3://y/"}], "replicas[1].site"),
    ):
        answer = web.api("PATCH", f"/api/v1/datasets/{dataset.pk}/", key, {"replicas": replicas})
        assert answer.status == 400, (replicas, answer.status, answer.body[:200])
        assert answer.json()["errors"] == [{"path": path, "message": "This field is required."}]
    # Nothing half-stored: the replica is as it was.
    assert list(DatasetReplica.objects.filter(dataset=dataset).values_list("uri", flat=True)) == [
        "s3://kept/"
    ]


# --- login lock-out ---------------------------------------------------------------------------


def test_a_strangers_failed_logins_do_not_stop_the_real_user(
    live_server: Any, django_user_model: Any, settings: Any
) -> None:
    settings.PORTAL_AUTH_FAILURES_PER_USER = 3
    name = f"victim-{uuid.uuid4().hex[:8]}"
    django_user_model.objects.create_user(name, password="right-password-123")
    stranger = Http(live_server.url, source="127.0.0.9")
    owner = Http(live_server.url, source="127.0.0.10")
    try:
        for _ in range(3):
            assert stranger.login(name, "guess") == 200  # the form again, with its error
        assert stranger.login(name, "another-guess") == 429  # brute force is throttled...
        assert stranger.login(name, "right-password-123") == 429  # ...even when it hits
        assert owner.login(name, "right-password-123") == 302  # the real user logs in
    finally:
        throttling.reset_user("127.0.0.9", name)
        cache.delete_many([throttling._key("addr", a) for a in ("127.0.0.9", "127.0.0.10")])


# --- the demo's SQLite file -------------------------------------------------------------------


def test_the_demo_database_and_its_folder_are_private(tmp_path: Path) -> None:
    var = tmp_path / "var"
    env = {
        "PATH": "/usr/bin:/bin",
        "DEBUG": "1",
        "DATABASE_URL": "",
        "PORTAL_VAR_DIR": str(var),
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    db = var / "portal.sqlite3"
    assert db.stat().st_size > 0
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    # An existing file (made by an older version, world-readable) is tightened too.
    db.chmod(0o644)
    subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, check=True, timeout=300
    )
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


# --- API keys ---------------------------------------------------------------------------------


def test_an_api_key_is_shown_once_stored_hashed_and_works(
    web: Http, scientist: User, project: Any
) -> None:
    out = io.StringIO()
    call_command("drf_create_token", scientist.username, stdout=out)
    key = out.getvalue().split()[2]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
        stored = [str(value) for row in cursor.fetchall() for value in row]
    assert stored and all(key not in value for value in stored)
    for keyword in ("Token", "Bearer"):
        answer = web.send("GET", "/api/v1/runs/", Authorization=f"{keyword} {key}")
        assert answer.status == 200, (keyword, answer.body[:200])
    token = ApiToken.objects.get(user=scientist)
    assert web.send("GET", "/api/v1/runs/", Authorization=f"Token {token.digest}").status == 401


def test_the_sandbox_writes_its_kubeconfig_for_its_owner_only(sandbox: SandboxServer) -> None:
    # The demo's var/kubeconfig holds the token its processes send to karmada-apiserver.
    assert stat.S_IMODE(sandbox.kubeconfig.stat().st_mode) == 0o600
