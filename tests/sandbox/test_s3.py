"""A site's artifact repository as S3 answers: a real listener (sandbox/s3/listener.py) over a
bucket folder, reached by botocore's own client (signed requests, pre-signed URLs) and by
hand-signed requests for what a client would not send. Each error is S3's code, HTTP status
and XML body (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)."""

from __future__ import annotations

import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore.auth
import botocore.session
import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from sandbox.artifacts import Repository
from sandbox.s3.client import send
from sandbox.s3.listener import Endpoint

HOST = "s3.site-a.sandbox.invalid"
BUCKET = "site-a-artifacts"
REGION = "eu-west"
AK, SK = "AKSITEA", "secret-of-site-a"


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Endpoint]:
    def new_bucket(name: str) -> Repository:
        return Repository(bucket=name, endpoint=HOST, root=tmp_path / "buckets" / name)

    ep = Endpoint(
        site="site-a",
        endpoint=HOST,
        region=REGION,
        store=Repository(
            bucket=BUCKET, endpoint=HOST, root=tmp_path / "buckets" / BUCKET, quota=4096
        ),
        secret_of=lambda ak: SK if ak == AK else None,
        new_bucket=new_bucket,
        spool=tmp_path / "spool",
    )
    ep.start()
    yield ep
    ep.stop()


def client(
    ep: Endpoint,
    ak: str = AK,
    sk: str = SK,
    region: str = REGION,
    signature_version: str = "s3v4",
) -> Any:
    """botocore's S3 client of the repository: the endpoint name in the URL (and so in the
    signed Host), the listener as its HTTP proxy."""
    return botocore.session.get_session().create_client(
        "s3",
        region_name=region,
        endpoint_url=f"http://{HOST}",
        aws_access_key_id=ak,
        aws_secret_access_key=sk,
        config=Config(
            proxies={"http": ep.url},
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            signature_version=signature_version,
        ),
    )


def error_of(exc: ClientError) -> tuple[str, int, str]:
    err = exc.response["Error"]
    return err["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"], err.get("Message", "")


def fetch(ep: Endpoint, url: str) -> tuple[int, bytes]:
    """A plain GET of a URL (a pre-signed one) at the listener, its host as Host."""
    u = urllib.parse.urlsplit(url)
    res = send(ep.address, u.netloc, "GET", f"{u.path}?{u.query}", {})
    return res.status, res.body


def xml_error(body: bytes) -> dict[str, str]:
    root = ET.fromstring(body)
    assert root.tag == "Error"
    return {e.tag: e.text or "" for e in root}


# -- success ------------------------------------------------------------------------------------


def test_put_get_head_list_range_delete_with_botocore(repo: Endpoint) -> None:
    s3 = client(repo)
    s3.put_object(Bucket=BUCKET, Key="wf/pod/out put.txt", Body=b"hello world")
    s3.put_object(Bucket=BUCKET, Key="wf/other.txt", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="elsewhere.txt", Body=b"y")
    got = s3.get_object(Bucket=BUCKET, Key="wf/pod/out put.txt")
    assert got["Body"].read() == b"hello world"
    part = s3.get_object(Bucket=BUCKET, Key="wf/pod/out put.txt", Range="bytes=6-10")
    assert part["Body"].read() == b"world"
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert s3.head_object(Bucket=BUCKET, Key="wf/pod/out put.txt")["ContentLength"] == 11
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="wf/")
    assert [o["Key"] for o in listed["Contents"]] == ["wf/other.txt", "wf/pod/out put.txt"]
    s3.delete_object(Bucket=BUCKET, Key="wf/other.txt")
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="wf/")
    assert [o["Key"] for o in listed["Contents"]] == ["wf/pod/out put.txt"]
    # Stored in the bucket's folder under its key.
    assert (Path(repo.store.root) / "wf/pod/out put.txt").read_bytes() == b"hello world"  # type: ignore[attr-defined]


def test_presigned_get_is_served_until_it_expires(repo: Endpoint) -> None:
    s3 = client(repo)
    s3.put_object(Bucket=BUCKET, Key="k.txt", Body=b"data")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "k.txt"}, ExpiresIn=3600
    )
    assert urllib.parse.urlsplit(url).hostname == HOST
    assert fetch(repo, url) == (200, b"data")


# -- S3's errors ----------------------------------------------------------------------------------


def test_anonymous_request_is_access_denied(repo: Endpoint) -> None:
    client(repo).put_object(Bucket=BUCKET, Key="k.txt", Body=b"data")
    status, body = fetch(repo, f"http://{HOST}/{BUCKET}/k.txt")
    assert status == 403
    err = xml_error(body)
    assert err["Code"] == "AccessDenied" and err["Message"] == "Access Denied"
    assert err["Resource"] == f"/{BUCKET}/k.txt" and err["RequestId"]


def test_unknown_access_key_and_wrong_secret(repo: Endpoint) -> None:
    with pytest.raises(ClientError) as exc:
        client(repo, ak="NOSUCHKEY").get_object(Bucket=BUCKET, Key="k")
    assert error_of(exc.value)[:2] == ("InvalidAccessKeyId", 403)
    with pytest.raises(ClientError) as exc:
        client(repo, sk="wrong").get_object(Bucket=BUCKET, Key="k")
    code, status, message = error_of(exc.value)
    assert (code, status) == ("SignatureDoesNotMatch", 403)
    assert message.startswith("The request signature we calculated does not match")


def test_tampered_presigned_url_does_not_match(repo: Endpoint) -> None:
    s3 = client(repo)
    s3.put_object(Bucket=BUCKET, Key="k.txt", Body=b"data")
    s3.put_object(Bucket=BUCKET, Key="other.txt", Body=b"other")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "k.txt"})
    for tampered in (
        url.replace("/k.txt?", "/other.txt?"),  # another object
        url.replace("X-Amz-Expires=3600", "X-Amz-Expires=7200"),  # a longer life
        url[:-4] + ("0000" if not url.endswith("0000") else "1111"),  # the signature
    ):
        status, body = fetch(repo, tampered)
        assert status == 403
        assert xml_error(body)["Code"] == "SignatureDoesNotMatch"


def test_expired_presigned_url_is_refused_before_its_signature(repo: Endpoint) -> None:
    s3 = client(repo)
    s3.put_object(Bucket=BUCKET, Key="k.txt", Body=b"data")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "k.txt"}, ExpiresIn=1
    )
    time.sleep(2.1)
    for candidate in (url, url[:-4] + "0000"):  # expired, and expired and tampered
        status, body = fetch(repo, candidate)
        assert status == 403
        err = xml_error(body)
        assert (err["Code"], err["Message"]) == ("AccessDenied", "Request has expired")


def test_presigned_expiry_is_at_most_a_week(repo: Endpoint) -> None:
    url = client(repo).generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "k.txt"}, ExpiresIn=604801
    )
    status, body = fetch(repo, url)
    assert status == 400
    err = xml_error(body)
    assert err["Code"] == "AuthorizationQueryParametersError"
    assert err["Message"] == "X-Amz-Expires must be less than a week (in seconds) that is 604800"


def test_request_time_too_skewed(repo: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    past = datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=16)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: past)
    with pytest.raises(ClientError) as exc:
        client(repo).get_object(Bucket=BUCKET, Key="k")
    assert error_of(exc.value)[:2] == ("RequestTimeTooSkewed", 403)


def test_region_mismatch_is_a_malformed_authorization(repo: Endpoint) -> None:
    with pytest.raises(ClientError) as exc:
        client(repo, region="us-east-1").get_object(Bucket=BUCKET, Key="k")
    code, status, message = error_of(exc.value)
    assert (code, status) == ("AuthorizationHeaderMalformed", 400)
    assert "the region 'us-east-1' is wrong; expecting 'eu-west'" in message


def signed_put(ep: Endpoint, key: str, signed_body: bytes, sent_body: bytes, unsigned: bool) -> Any:
    """A PUT signed by botocore over `signed_body` (or UNSIGNED-PAYLOAD) sending `sent_body`."""
    url = f"http://{HOST}/{BUCKET}/{key}"
    req = AWSRequest(method="PUT", url=url, data=signed_body)
    if unsigned:
        req.headers["X-Amz-Content-SHA256"] = "UNSIGNED-PAYLOAD"
        SigV4Auth(Credentials(AK, SK), "s3", REGION).add_auth(req)
    else:
        S3SigV4Auth(Credentials(AK, SK), "s3", REGION).add_auth(req)
    import io

    headers = {k: str(v) for k, v in req.headers.items()}
    return send(
        ep.address, HOST, "PUT", f"/{BUCKET}/{key}", headers, io.BytesIO(sent_body), len(sent_body)
    )


def test_payload_hash_is_checked_unless_unsigned(repo: Endpoint) -> None:
    res = signed_put(repo, "a.txt", b"abc", b"abd", unsigned=False)
    assert res.status == 400
    assert xml_error(res.body)["Code"] == "XAmzContentSHA256Mismatch"
    with pytest.raises(ClientError):
        client(repo).head_object(Bucket=BUCKET, Key="a.txt")  # nothing stored
    assert signed_put(repo, "b.txt", b"", b"anything", unsigned=True).status == 200
    assert client(repo).get_object(Bucket=BUCKET, Key="b.txt")["Body"].read() == b"anything"


def test_no_such_key_and_no_such_bucket(repo: Endpoint) -> None:
    s3 = client(repo)
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket=BUCKET, Key="missing")
    assert error_of(exc.value) == ("NoSuchKey", 404, "The specified key does not exist.")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket="site-b-artifacts", Key="k")
    assert error_of(exc.value)[:2] == ("NoSuchBucket", 404)
    # ... until someone makes it (CreateBucket); a name made twice is already owned.
    s3.create_bucket(Bucket="team-bucket")
    s3.put_object(Bucket="team-bucket", Key="k", Body=b"v")
    assert s3.get_object(Bucket="team-bucket", Key="k")["Body"].read() == b"v"
    with pytest.raises(ClientError) as exc:
        s3.create_bucket(Bucket="team-bucket")
    assert error_of(exc.value)[:2] == ("BucketAlreadyOwnedByYou", 409)


def test_a_put_past_the_bucket_quota_is_refused_as_minio_refuses_it(repo: Endpoint) -> None:
    s3 = client(repo)
    s3.put_object(Bucket=BUCKET, Key="small", Body=b"x" * 1000)
    with pytest.raises(ClientError) as exc:
        s3.put_object(Bucket=BUCKET, Key="big", Body=b"x" * 4000)
    assert error_of(exc.value) == ("XMinioAdminBucketQuotaExceeded", 400, "Bucket quota exceeded")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=BUCKET, Key="big")


def test_expiry_is_judged_before_the_key_and_the_region(repo: Endpoint) -> None:
    for s3 in (client(repo, ak="NOSUCHKEY"), client(repo, region="us-east-1")):
        url = s3.generate_presigned_url(
            "get_object", Params={"Bucket": BUCKET, "Key": "k"}, ExpiresIn=1
        )
        time.sleep(1.1)
        status, body = fetch(repo, url)
        assert (status, xml_error(body)["Message"]) == (403, "Request has expired")
    url = client(repo, region="us-east-1").generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "k"}
    )
    status, body = fetch(repo, url)
    err = xml_error(body)
    assert (status, err["Code"]) == (400, "AuthorizationQueryParametersError")
    assert "the region 'us-east-1' is wrong; expecting 'eu-west'" in err["Message"]


def test_the_signature_covers_the_host_the_listener_receives(repo: Endpoint) -> None:
    client(repo).put_object(Bucket=BUCKET, Key="k.txt", Body=b"data")
    url = client(repo).generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "k.txt"}
    )
    u = urllib.parse.urlsplit(url)
    # The same request reaching the listener under another name does not match.
    for host in ("s3.site-b.sandbox.invalid", f"127.0.0.1:{repo.address[1]}"):
        res = send(repo.address, host, "GET", f"{u.path}?{u.query}", {})
        assert res.status == 403
        assert xml_error(res.body)["Code"] == "SignatureDoesNotMatch"


def test_signature_version_2_is_not_supported(repo: Endpoint) -> None:
    url = client(repo, signature_version="s3").generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "k"}
    )
    assert "AWSAccessKeyId=" in url
    status, body = fetch(repo, url)
    err = xml_error(body)
    assert (status, err["Code"]) == (400, "InvalidRequest")
    assert err["Message"].endswith("Please use AWS4-HMAC-SHA256.")
