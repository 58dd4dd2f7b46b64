"""The limits a step meets, end to end as an ordinary project member over HTTP (an API token
against the live server, a logged-in browser for the pages; PostgreSQL, Redis, a Celery
worker, the watcher and a sandbox that really runs the steps): a parameter over the bound
fails its step with the bound named and the run stays small; a long output is shown in part
and paged; a step past its memory limit is OOMKilled, one past its disk limit Evicted, one
writing past its bucket's quota refused."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml
from django.contrib.auth.models import User

from sandbox.fleet import DEMO_FLEET
from tests.fixtures_stack import Stack, running_stack, stack_for_test
from tests.live_sessions import api_session, finished_run, post_run, web_session

pytestmark = [pytest.mark.integration]


def workflow(script: str, **template: Any) -> str:
    step = {
        "name": "main",
        "container": {"image": "alpine:3.23", "command": ["sh", "-c", script]},
        **template,
    }
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": "limits-"},
            "spec": {"entrypoint": "main", "templates": [step]},
        }
    )


@pytest.fixture
def member(live_executing: Stack, live_server: Any) -> requests.Session:
    """load_demo's scientist, an ordinary member of eo-demo, with an API token."""
    return api_session(live_server.url, "scientist")


@pytest.fixture
def web(member: requests.Session) -> requests.Session:
    """The same scientist logged in to the web pages."""
    return web_session(member.base, "scientist")  # type: ignore[attr-defined]


def unit(member: requests.Session, run_id: int) -> dict[str, Any]:
    base = member.base  # type: ignore[attr-defined]
    answer = member.get(f"{base}/api/v1/runs/{run_id}/units/main/", timeout=30)
    assert answer.ok, answer.text
    return dict(answer.json())


def test_a_parameter_over_the_bound_fails_its_step_and_the_run_stays_small(
    member: requests.Session,
) -> None:
    run_id = post_run(
        member,
        workflow(
            "head -c 400000 /dev/zero | tr '\\0' a > /tmp/p",
            outputs={"parameters": [{"name": "big", "valueFrom": {"path": "/tmp/p"}}]},
        ),
    )
    assert finished_run(run_id).status != "Succeeded"
    got = unit(member, run_id)
    assert got["phase"] == "Error"
    assert "262144 bytes (256Ki) an output parameter may hold" in got["message"]
    base = member.base  # type: ignore[attr-defined]
    run = member.get(f"{base}/api/v1/runs/{run_id}/", timeout=30)
    assert len(run.content) < 20_000


def test_nul_bytes_in_outputs_end_the_run_with_the_output_named(member: requests.Session) -> None:
    """Argo keeps a value holding NUL (Go's JSON writes \\u0000, the API accepts it);
    PostgreSQL refuses it: a parameter holding one fails its step, naming it, and a result
    keeps its text with U+FFFD in place of each NUL. Before, both stayed Running forever."""
    param = post_run(
        member,
        workflow(
            "printf 'a\\000b' > /tmp/p",
            outputs={"parameters": [{"name": "raw", "valueFrom": {"path": "/tmp/p"}}]},
        ),
    )
    stdout = post_run(member, workflow("printf 'x\\000y'"))
    assert finished_run(param).status == "Failed"
    got = unit(member, param)
    assert got["phase"] in ("Failed", "Error")
    assert got["message"].startswith("output parameter raw holds NUL bytes (U+0000)")
    assert finished_run(stdout).status == "Succeeded"
    assert unit(member, stdout)["outputs"]["result"] == "x\ufffdy"


def test_a_long_output_is_shown_in_part_and_paged(
    member: requests.Session, web: requests.Session
) -> None:
    run_id = post_run(
        member,
        workflow(
            "seq 1 30000 > /tmp/p; seq 1 3000",
            outputs={"parameters": [{"name": "numbers", "valueFrom": {"path": "/tmp/p"}}]},
        ),
    )
    assert finished_run(run_id).status == "Succeeded"
    whole = "\n".join(str(i) for i in range(1, 30001))
    base = member.base  # type: ignore[attr-defined]
    for shown in (
        unit(member, run_id)["outputs"],
        member.get(f"{base}/api/v1/runs/{run_id}/", timeout=30).json()["units"][0]["outputs"],
    ):
        (param,) = shown["parameters"]
        assert param == {
            "name": "numbers",
            "value": whole[:4096],
            "truncated": True,
            "size": len(whole),
        }
        assert shown["resultTruncated"] is True and shown["result"].startswith("1\n2\n")
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = member.get(
            f"{base}/api/v1/runs/{run_id}/units/main/outputs/",
            params={"parameter": "numbers", "offset": str(offset), "limit": "50000"},
            timeout=30,
        ).json()
        pages.append(page["value"])
        offset = page["next_offset"]
    assert len(pages) == 4 and "".join(pages) == whole
    bad = member.get(
        f"{base}/api/v1/runs/{run_id}/units/main/outputs/", params={"limit": "x"}, timeout=30
    )
    assert bad.status_code == 400
    assert {e["path"] for e in bad.json()["errors"]} == {"parameter", "limit"}
    missing = member.get(
        f"{base}/api/v1/runs/{run_id}/units/main/outputs/", params={"parameter": "nope"}
    )
    assert missing.status_code == 404
    # The step panel shows the start and pages the rest on request.
    panel = web.get(f"{base}/runs/{run_id}/units/main/", timeout=30).text
    assert "Show more" in panel and whole[4096:4200] not in panel
    more = web.get(
        f"{base}/runs/{run_id}/units/main/outputs/",
        params={"parameter": "numbers", "offset": "4096"},
        timeout=30,
    ).text
    assert whole[4096:4200] in more and "Show more" in more


def limited(script: str, **limits: str) -> str:
    doc = yaml.safe_load(workflow(script))
    doc["spec"]["templates"][0]["container"]["resources"] = {"limits": dict(limits)}
    return yaml.safe_dump(doc)


def test_a_step_past_its_memory_or_disk_limit_fails_as_the_kubelet_says(
    member: requests.Session,
) -> None:
    hog = 'python3 -c "x = bytearray(200 * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1"'
    oom = post_run(member, limited(hog, memory="64Mi"))
    fill = "head -c 3000000 /dev/zero > /tmp/f; sleep 100000"
    evicted = post_run(member, limited(fill, **{"ephemeral-storage": "1Mi"}))
    for run_id in (oom, evicted):
        assert finished_run(run_id).status == "Failed"
    assert unit(member, oom)["message"] == "main: OOMKilled (exit code 137)"
    assert unit(member, evicted)["message"] == (
        # The kubelet's format ends with a space, kept as the member reports it.
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "
    )


def test_the_step_panel_pages_a_long_output_in_the_browser(
    browser: Any,
    live_server: Any,
    live_executing: Stack,
) -> None:
    from playwright.sync_api import expect

    from portal import services
    from tests.fixtures_browser import login

    scientist = User.objects.get(username="scientist")
    body = workflow(
        "seq 1 30000 > /tmp/p",
        outputs={"parameters": [{"name": "numbers", "valueFrom": {"path": "/tmp/p"}}]},
    )
    run = services.run_submit(user=scientist, body=body, project="eo-demo")
    assert finished_run(run.pk).status == "Succeeded"
    whole = "\n".join(str(i) for i in range(1, 30001))
    page = login(browser, live_server.url, "scientist")
    page.goto(f"{live_server.url}/runs/{run.pk}/units/main/")
    panel = page.locator("#unit-panel")
    expect(panel).to_contain_text(f"4096 of {len(whole)} characters shown", timeout=30_000)
    assert whole[4096:4200] not in panel.inner_text()
    panel.locator("button:has-text('Show more')").click()
    expect(panel).to_contain_text(whole[4096:4200].split("\n")[1], timeout=30_000)
    expect(panel).to_contain_text(f"{4096 + 16384} of {len(whole)} characters shown")
    page.close()


@pytest.fixture(scope="module")
def quota_stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: Any,
    django_db_blocker: Any,
    live_server: Any,
) -> Iterator[Stack]:
    """An executing stack on the demo fleet with a 1 MiB quota on every site's bucket."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    for site in fleet["sites"]:
        site["artifacts"]["quota"] = "1Mi"
    path = tmp_path_factory.mktemp("quota") / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    with running_stack(
        tmp_path_factory, django_db_blocker, live_server, resync=True, execute=True, fleet=path
    ) as s:
        yield s


@pytest.fixture
def live_quota(quota_stack: Stack, transactional_db: Any, settings: Any) -> Iterator[Stack]:
    with stack_for_test(quota_stack, settings) as s:
        yield s


def test_an_output_past_the_buckets_quota_is_refused_and_fails_the_step(
    live_quota: Stack, live_server: Any
) -> None:
    api = api_session(live_server.url, "scientist")

    def writer(size: int) -> str:
        return workflow(
            f"head -c {size} /dev/urandom > /tmp/out",
            outputs={"artifacts": [{"name": "o", "path": "/tmp/out", "archive": {"none": {}}}]},
        )

    small = post_run(api, writer(100_000))
    assert finished_run(small).status == "Succeeded"
    big = post_run(api, writer(2_000_000))
    assert finished_run(big).status != "Succeeded"
    got = unit(api, big)
    assert got["phase"] == "Error"
    assert got["message"] == (
        "failed to save outputs: /tmp/out: Bucket quota exceeded (XMinioAdminBucketQuotaExceeded)"
    )
