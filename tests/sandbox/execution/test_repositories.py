"""Steps reach the sites' artifact repositories over S3 (sandbox/s3/): pre-signed `http`
inputs read from a repository's listener under the fleet's reach rules, S3's errors in the
node's message, outputs saved where their own location says and recorded as Argo records
them, credentials only from Secrets the step's own member holds."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.sandbox.execution.conftest import Member, secret
from tests.sandbox.execution.test_execution import sh, wf

A_ENDPOINT = "s3.site-a.sandbox.invalid"
A_BUCKET = "site-a-artifacts"
A_SECRET = "site-a-artifacts-credentials"


@pytest.fixture
def site_a_s3(site_a: Member) -> Any:
    """A client of site-a's repository with site-a's keys: its credential Secret on its own
    member is what the repository accepts."""
    site_a.put(secret(A_SECRET, accessKey="ak-site-a", secretKey="sk-site-a"))
    return site_a.s3("ak-site-a", "sk-site-a")


def reader(url: str) -> dict[str, Any]:
    t = sh("main", "cat /tmp/in")
    t["inputs"] = {"artifacts": [{"name": "in", "path": "/tmp/in", "http": {"url": url}}]}
    return wf(t)


def only_pod(member: Member, status: dict[str, Any]) -> dict[str, Any]:
    (node,) = member.pods(status).values()
    return node


def stored(s3: Any, body: bytes) -> tuple[str, str]:
    key = f"t/{uuid.uuid4().hex}.txt"
    s3.put_object(Bucket=A_BUCKET, Key=key, Body=body)
    return key, s3.generate_presigned_url(
        "get_object", Params={"Bucket": A_BUCKET, "Key": key}, ExpiresIn=600
    )


def test_repositories_are_listed_with_their_listeners(site_a: Member) -> None:
    items = site_a.server.request("GET", "/_sandbox/repositories")["items"]
    by_site = {r["site"]: r for r in items}
    assert set(by_site) == {"site-a", "site-b", "site-c"}
    a = by_site["site-a"]
    assert (a["endpoint"], a["bucket"], a["region"]) == (A_ENDPOINT, A_BUCKET, "eu-west")
    assert by_site["site-c"]["region"] == "eu-central"
    assert a["url"].startswith("http://127.0.0.1:")
    assert (a["readableFrom"], a["credentialsSecret"]) == (["site-b"], A_SECRET)
    assert by_site["site-b"]["readableFrom"] == ["site-a", "site-c"]


def test_presigned_http_input_is_read_from_the_repository(site_a_s3: Any, site_b: Member) -> None:
    _key, url = stored(site_a_s3, b"payload")
    status = site_b.wait(site_b.create(reader(url)))
    assert status["phase"] == "Succeeded", status.get("message")
    assert only_pod(site_b, status)["outputs"]["result"] == "payload"


def test_tampered_presigned_url_ends_the_run_in_error_with_s3s_message(
    site_a_s3: Any, site_b: Member
) -> None:
    key, url = stored(site_a_s3, b"payload")
    other, _ = stored(site_a_s3, b"someone else's")
    status = site_b.wait(site_b.create(reader(url.replace(key, other))))
    assert status["phase"] == "Error"
    node = only_pod(site_b, status)
    assert node["phase"] == "Error"
    assert (
        "failed with reason: 403 Forbidden: The request signature we calculated does not "
        in (node["message"])
    )
    assert node["message"].endswith("(SignatureDoesNotMatch)")
    assert "cat" not in node.get("outputs", {}).get("result", "")


def test_expired_presigned_url_ends_the_run_in_error(site_a_s3: Any, site_b: Member) -> None:
    key = f"t/{uuid.uuid4().hex}.txt"
    site_a_s3.put_object(Bucket=A_BUCKET, Key=key, Body=b"payload")
    url = site_a_s3.generate_presigned_url(
        "get_object", Params={"Bucket": A_BUCKET, "Key": key}, ExpiresIn=1
    )
    time.sleep(2.1)
    status = site_b.wait(site_b.create(reader(url)))
    assert status["phase"] == "Error"
    node = only_pod(site_b, status)
    assert node["message"] == (
        f"loading content from {url} failed with reason: 403 Forbidden: "
        "Request has expired (AccessDenied)"
    )


def test_presigned_url_of_a_repository_the_site_cannot_reach(
    site_a_s3: Any, site_c: Member
) -> None:
    _key, url = stored(site_a_s3, b"payload")
    status = site_c.wait(site_c.create(reader(url)))
    assert status["phase"] == "Error"
    assert only_pod(site_c, status)["message"] == (
        f'Get "{url}": dial tcp: lookup {A_ENDPOINT}: no such host'
    )


def placed(key: str, secret_name: str | None = A_SECRET) -> dict[str, Any]:
    """A step writing one output to site-a's repository (its own location) and one key-only."""
    location: dict[str, Any] = {"endpoint": A_ENDPOINT, "bucket": A_BUCKET, "key": key}
    if secret_name:
        location["accessKeySecret"] = {"name": secret_name, "key": "accessKey"}
        location["secretKeySecret"] = {"name": secret_name, "key": "secretKey"}
    t = sh("main", "echo there > /tmp/o; echo here > /tmp/k")
    t["outputs"] = {
        "artifacts": [
            {"name": "o", "path": "/tmp/o", "archive": {"none": {}}, "s3": location},
            {"name": "k", "path": "/tmp/k"},
        ]
    }
    return wf(t)


def test_output_with_its_own_location_is_saved_there_and_recorded_in_full(
    site_a_s3: Any, site_b: Member
) -> None:
    # The step's copy of site-a's Secret, in its own namespace on its own member.
    site_b.put(secret(A_SECRET, accessKey="ak-site-a", secretKey="sk-site-a"))
    key = f"placed/{uuid.uuid4().hex}.txt"
    name = site_b.create(placed(key))
    status = site_b.wait(name)
    assert status["phase"] == "Succeeded", status.get("message")
    arts = {a["name"]: a for a in only_pod(site_b, status)["outputs"]["artifacts"]}
    assert arts["o"]["s3"] == {
        "endpoint": A_ENDPOINT,
        "bucket": A_BUCKET,
        "key": key,
        "accessKeySecret": {"name": A_SECRET, "key": "accessKey"},
        "secretKeySecret": {"name": A_SECRET, "key": "secretKey"},
    }
    assert site_a_s3.get_object(Bucket=A_BUCKET, Key=key)["Body"].read() == b"there\n"
    assert not (site_b.data_dir / "buckets" / "site-b-artifacts" / key).exists()
    # A key-only output: its key alone, the repository in status.artifactRepositoryRef.
    assert set(arts["k"]["s3"]) == {"key"}
    assert arts["k"]["s3"]["key"].startswith(f"{name}/")
    assert (site_b.data_dir / "buckets" / "site-b-artifacts" / arts["k"]["s3"]["key"]).is_file()
    ref = status["artifactRepositoryRef"]
    assert ref["default"] is True
    assert ref["artifactRepository"]["s3"]["bucket"] == "site-b-artifacts"
    assert ref["artifactRepository"]["s3"]["endpoint"] == "s3.site-b.sandbox.invalid"


def test_output_to_a_repository_the_site_cannot_reach_fails(site_a_s3: Any, site_c: Member) -> None:
    site_c.put(secret(A_SECRET, accessKey="ak-site-a", secretKey="sk-site-a"))
    key = f"placed/{uuid.uuid4().hex}.txt"
    status = site_c.wait(site_c.create(placed(key)))
    assert status["phase"] in ("Failed", "Error")
    node = only_pod(site_c, status)
    assert f"dial tcp: lookup {A_ENDPOINT}: no such host" in node["message"]
    assert node["message"].startswith("failed to save outputs: /tmp/o: ")


def in_namespace(body: dict[str, Any], namespace: str) -> dict[str, Any]:
    body["metadata"]["namespace"] = namespace
    return body


def test_a_step_whose_secret_is_not_on_its_member_fails(
    site_a_s3: Any, site_a: Member, site_b: Member
) -> None:
    ns = f"no-creds-{uuid.uuid4().hex[:6]}"
    # site-a's member holds site-a's Secret (the repository's), site-b's namespace does not.
    key = f"placed/{uuid.uuid4().hex}.txt"
    status = site_b.wait(site_b.create(in_namespace(placed(key, secret_name=None), ns)))
    node = only_pod(site_b, status)
    assert status["phase"] in ("Failed", "Error")
    assert node["message"] == (
        f'failed to save outputs: /tmp/o: failed to save artifact: secrets "{A_SECRET}" not found'
    )
    existing, _url = stored(site_a_s3, b"x")
    t = sh("main", "cat /tmp/in")
    t["inputs"] = {
        "artifacts": [
            {
                "name": "in",
                "path": "/tmp/in",
                "s3": {"endpoint": A_ENDPOINT, "bucket": A_BUCKET, "key": existing},
            }
        ]
    }
    status = site_b.wait(site_b.create(in_namespace(wf(t), ns)))
    assert status["phase"] == "Error"
    assert only_pod(site_b, status)["message"] == (
        f'failed to load artifact: secrets "{A_SECRET}" not found'
    )
    # A Secret there whose keys the repository does not know (stale, or forged): S3 refuses.
    forged = secret(A_SECRET, accessKey="guessed", secretKey="guessed")
    forged["metadata"] = {"name": A_SECRET, "namespace": ns}
    site_b.put(forged)
    status = site_b.wait(site_b.create(in_namespace(wf(t), ns)))
    assert status["phase"] == "Error"
    assert only_pod(site_b, status)["message"] == (
        f"failed to load artifact: s3://{A_BUCKET}/{existing}: The AWS Access Key Id you "
        "provided does not exist in our records. (InvalidAccessKeyId)"
    )


def pusher(url: str) -> dict[str, Any]:
    t = sh("main", "echo pushed > /tmp/o")
    t["outputs"] = {
        "artifacts": [
            {"name": "o", "path": "/tmp/o", "archive": {"none": {}}, "http": {"url": url}}
        ]
    }
    return wf(t)


def test_presigned_put_output_is_written_to_the_repository(
    site_a_s3: Any, site_b: Member, site_c: Member
) -> None:
    key = f"pushed/{uuid.uuid4().hex}.txt"
    url = site_a_s3.generate_presigned_url(
        "put_object", Params={"Bucket": A_BUCKET, "Key": key}, ExpiresIn=600
    )
    status = site_b.wait(site_b.create(pusher(url)))
    assert status["phase"] == "Succeeded", status.get("message")
    (art,) = only_pod(site_b, status)["outputs"]["artifacts"]
    assert art["http"] == {"url": url}
    assert site_a_s3.get_object(Bucket=A_BUCKET, Key=key)["Body"].read() == b"pushed\n"
    # The same URL for another key does not match its signature; nothing is written.
    other = f"pushed/{uuid.uuid4().hex}.txt"
    status = site_b.wait(site_b.create(pusher(url.replace(key, other))))
    node = only_pod(site_b, status)
    assert node["message"].startswith("failed to save outputs: /tmp/o: saving file o to ")
    assert node["message"].endswith(
        "failed with reason: 403 Forbidden: The request signature "
        "we calculated does not match the signature you provided. Check your key and signing "
        "method. (SignatureDoesNotMatch)"
    )
    assert not site_a_s3.list_objects_v2(Bucket=A_BUCKET, Prefix=other).get("Contents")
    # A site that may not reach site-a's repository cannot push there either.
    status = site_c.wait(site_c.create(pusher(url)))
    assert only_pod(site_c, status)["message"] == (
        f'failed to save outputs: /tmp/o: Put "{url}": dial tcp: lookup {A_ENDPOINT}: no such host'
    )
