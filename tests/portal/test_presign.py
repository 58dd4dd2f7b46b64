"""Pre-signed reads: the URL a step gets for another site's output is an S3 SigV4
query-signed GET for exactly that object, checked here against the signature computed from
AWS's published algorithm (an independent implementation, not botocore's), and the step's
arguments carry the URL and no Secret reference."""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse

import pytest

from portal import presign

KEYS = presign.Keys("demo-site-a", "demo-site-a-secret")
WHERE = presign.Location("s3.site-a.sandbox.invalid", "site-a-artifacts", "runs/r 1/out.tgz")
STORES = {
    "site-a": {
        "endpoint": "s3.site-a.sandbox.invalid",
        "bucket": "site-a-artifacts",
        "credentials_secret": "site-a-artifacts-credentials",
    }
}


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def expected_signature(url: str, secret: str) -> str:
    """AWS Signature Version 4 for a query-signed request (docs.aws.amazon.com, "Authenticating
    Requests: Using Query Parameters"), payload UNSIGNED-PAYLOAD, signed header host."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    params = [(k, v) for k, v in query if k != "X-Amz-Signature"]
    q = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(params)
    )
    canonical = "\n".join(
        ["GET", parts.path, q, f"host:{parts.netloc}\n", "host", "UNSIGNED-PAYLOAD"]
    )
    values = dict(params)
    date = values["X-Amz-Date"]
    scope = values["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    day, region, service, _ = scope.split("/")
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), region), service), "aws4_request")
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def test_the_url_is_a_sigv4_get_for_exactly_that_object() -> None:
    url = presign.presigned_url(WHERE, KEYS, expires=1800)
    parts = urllib.parse.urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("http", "s3.site-a.sandbox.invalid")
    assert parts.path == "/site-a-artifacts/runs/r%201/out.tgz"
    query = dict(urllib.parse.parse_qsl(parts.query))
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "1800"
    assert query["X-Amz-Credential"].startswith("demo-site-a/")
    assert query["X-Amz-Credential"].endswith("/us-east-1/s3/aws4_request")
    assert query["X-Amz-SignedHeaders"] == "host"
    assert query["X-Amz-Signature"] == expected_signature(url, KEYS.secret_key)
    # Another object, or another key, would not have this signature.
    assert query["X-Amz-Signature"] != expected_signature(url, "another-secret")
    other = url.replace("out.tgz", "other.tgz")
    assert query["X-Amz-Signature"] != expected_signature(other, KEYS.secret_key)


@pytest.mark.parametrize(
    ("deadline", "expires"),
    [(None, 3600), (120.4, 121), (0.2, 1), (-5, 1), (30 * 24 * 3600, 7 * 24 * 3600)],
)
def test_a_url_lives_as_long_as_the_step_may_run_within_s3_s_limit(deadline, expires) -> None:
    assert presign.expiry_for(deadline) == expires


def test_s3_s_limit_is_never_exceeded() -> None:
    with pytest.raises(ValueError, match="expires"):
        presign.presigned_url(WHERE, KEYS, expires=7 * 24 * 3600 + 1)


def test_a_full_location_is_read_where_argo_recorded_it() -> None:
    artifact = {"name": "a", "s3": {"endpoint": "s3.x", "bucket": "b", "key": "k"}}
    recorded = {"s3": {"endpoint": "s3.y", "bucket": "c"}}
    where = presign.location_of(artifact, recorded, STORES["site-a"])
    assert (where.endpoint, where.bucket, where.key) == ("s3.x", "b", "k")


def test_a_key_only_output_is_in_the_repository_its_step_workflow_used() -> None:
    artifact = {"name": "a", "s3": {"key": "runs/k.tgz"}}
    recorded = {"s3": {"endpoint": "s3.other.invalid", "bucket": "other", "region": "eu"}}
    where = presign.location_of(artifact, recorded, STORES["site-a"])
    assert (where.endpoint, where.bucket, where.region) == ("s3.other.invalid", "other", "eu")
    # Only when the member recorded none: the inventory's repository of its site.
    where = presign.location_of(artifact, None, STORES["site-a"])
    assert (where.endpoint, where.bucket) == ("s3.site-a.sandbox.invalid", "site-a-artifacts")


def test_inputs_in_a_fleet_repository_become_http_artifacts_without_secrets() -> None:
    asked: list[str] = []

    def keys(secret: str) -> presign.Keys:
        asked.append(secret)
        return KEYS

    inputs = [
        {
            "name": "data",
            "path": "/tmp/in",
            "mode": 0o644,
            "s3": {
                "endpoint": "s3.site-a.sandbox.invalid",
                "bucket": "site-a-artifacts",
                "key": "runs/r/out.tgz",
            },
        },
        {"name": "elsewhere", "s3": {"endpoint": "s3.aws", "bucket": "pub", "key": "k"}},
        {"name": "web", "http": {"url": "https://example.org/x"}},
    ]
    signed = presign.sign_inputs(inputs, STORES, keys, 600)
    assert asked == ["site-a-artifacts-credentials"]
    first = signed[0]
    assert set(first) == {"name", "path", "mode", "http"}
    assert first["http"]["url"].startswith(
        "http://s3.site-a.sandbox.invalid/site-a-artifacts/runs/r/out.tgz?"
    )
    assert "X-Amz-Expires=600" in first["http"]["url"]
    assert signed[1:] == inputs[1:]  # not the fleet's: left as written


def test_an_input_at_the_step_s_own_site_is_read_with_its_own_secret() -> None:
    """Argo's s3 driver reads a folder of keys (an unarchived directory), a single pre-signed
    GET cannot: at the producer's own site, where the site's Secret is, the input stays s3."""
    inputs = [
        {
            "name": "data",
            "s3": {
                "endpoint": "s3.site-a.sandbox.invalid",
                "bucket": "site-a-artifacts",
                "key": "runs/r/out",
            },
        }
    ]
    (kept,) = presign.sign_inputs(inputs, STORES, lambda s: KEYS, 600, site="site-a")
    assert "http" not in kept
    assert kept["s3"]["key"] == "runs/r/out"
    assert kept["s3"]["accessKeySecret"] == {
        "name": "site-a-artifacts-credentials",
        "key": "accessKey",
    }
    (signed,) = presign.sign_inputs(inputs, STORES, lambda s: KEYS, 600, site="site-b")
    assert "s3" not in signed and "X-Amz-Signature=" in signed["http"]["url"]
