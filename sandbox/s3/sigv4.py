"""AWS Signature Version 4 as S3 checks it, in both forms: the `Authorization` header and the
pre-signed query (`X-Amz-*`). The signature is recomputed with botocore's own signers
(`botocore.auth.S3SigV4Auth` and `S3SigV4QueryAuth`: their canonical request, string to sign
and signing key), from the request exactly as it arrived: the path as sent (S3 does not
normalise it: "For S3, we do not normalize the path", botocore/auth.py), the query as sent, the
headers the client names in SignedHeaders, and the Host header received.

The checks and their order follow S3's answers
(https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html,
https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html,
https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html): a request with no
signature is anonymous and refused (`AccessDenied`: no bucket here has a public policy); a
pre-signed URL past `X-Amz-Expires` is refused before its signature is looked at
(`AccessDenied`, "Request has expired"), and `X-Amz-Expires` may be at most 604800 seconds
("X-Amz-Expires must be less than a week (in seconds) that is 604800"); then the access key
(`InvalidAccessKeyId`), the region of the credential scope (`AuthorizationHeaderMalformed`,
`AuthorizationQueryParametersError` for the query form), the request time of a header-signed
request (more than 15 minutes away: `RequestTimeTooSkewed`), the signature
(`SignatureDoesNotMatch`); the payload's hash is checked once the body is read
(`XAmzContentSHA256Mismatch`; `UNSIGNED-PAYLOAD` is accepted).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from sandbox.s3.errors import S3Error

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_EXPIRES = 604800  # seconds: a week
MAX_SKEW = timedelta(minutes=15)
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
TIMESTAMP = "%Y%m%dT%H%M%SZ"  # botocore's SIGV4_TIMESTAMP


@dataclass
class Verified:
    access_key: str
    # The body's SHA-256 (hex) the signature covers; None: unsigned (pre-signed or
    # UNSIGNED-PAYLOAD), nothing to check.
    payload_sha256: str | None


def verify(
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    region: str,
    secret_of: Callable[[str], str | None],
    now: datetime | None = None,
) -> Verified:
    """Check the request's signature; `path` and `query` as sent (still percent-encoded),
    `headers` with lower-case names, `secret_of` the secret key of an access key (None: no
    such key). Raises S3Error."""
    now = now or datetime.now(UTC)
    params = _query_pairs(query)
    names = {k for k, _ in params}
    auth = headers.get("authorization")
    if auth is not None:
        return _verify_header(method, path, query, headers, auth, region, secret_of, now)
    if "X-Amz-Signature" in names or "X-Amz-Credential" in names or "X-Amz-Algorithm" in names:
        return _verify_query(method, path, query, params, headers, region, secret_of, now)
    if "Signature" in names and "AWSAccessKeyId" in names:
        raise _SIGV2
    raise S3Error("AccessDenied")


# Signature Version 2 (query or header): what S3 answers where only SigV4 is accepted (every
# region opened since 2014, and every bucket since SigV2's turn-off).
_SIGV2 = S3Error(
    "InvalidRequest",
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
)


def _query_pairs(query: str) -> list[tuple[str, str]]:
    out = []
    for pair in query.split("&") if query else []:
        key, _, value = pair.partition("=")
        out.append((_unquote(key), _unquote(value)))
    return out


def _unquote(value: str) -> str:
    from urllib.parse import unquote

    return unquote(value)


def _credential(
    credential: str,
    region: str,
    secret_of: Callable[[str], str | None],
    code: str,
    where: str,
) -> tuple[str, str, str]:
    """(access key, date, secret) of `AK/yyyymmdd/region/s3/aws4_request`, checked in S3's
    order: its form, then the key, then the region. S3 words a bad credential the same way in
    a query and in a header but for the error code and the opening (``where``)."""
    parts = credential.split("/")
    if len(parts) != 5 or parts[3] != "s3" or parts[4] != "aws4_request":
        raise S3Error(
            code,
            f"{where} the Credential is mal-formed; expecting "
            f'"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request". ({credential})',
        )
    access_key, day, scope_region = parts[0], parts[1], parts[2]
    secret = secret_of(access_key)
    if secret is None:
        raise S3Error("InvalidAccessKeyId")
    if scope_region != region:
        raise S3Error(code, f"{where} the region '{scope_region}' is wrong; expecting '{region}'")
    return access_key, day, secret


def _verify_query(
    method: str,
    path: str,
    query: str,
    params: list[tuple[str, str]],
    headers: Mapping[str, str],
    region: str,
    secret_of: Callable[[str], str | None],
    now: datetime,
) -> Verified:
    got = dict(params)
    expires = _query_expires(got)
    signed_at = _timestamp(got["X-Amz-Date"], query_form=True)
    # Expiry first: an expired URL is refused whatever its signature.
    if now > signed_at + timedelta(seconds=expires):
        raise S3Error("AccessDenied", "Request has expired")
    if signed_at - now > MAX_SKEW:
        raise S3Error("AccessDenied", "Request is not valid yet")
    access_key, day, secret = _credential(
        got["X-Amz-Credential"],
        region,
        secret_of,
        "AuthorizationQueryParametersError",
        "Error parsing the X-Amz-Credential parameter;",
    )
    if day != got["X-Amz-Date"][:8]:
        raise S3Error("SignatureDoesNotMatch")
    # The canonical query string holds every parameter but X-Amz-Signature (botocore's
    # SigV4QueryAuth: "we're not including X-Amz-Signature"), encoded as sent.
    unsigned = "&".join(p for p in query.split("&") if p.partition("=")[0] != "X-Amz-Signature")
    expected = _signature(
        S3SigV4QueryAuth,
        access_key,
        secret,
        region,
        method,
        path,
        unsigned,
        _signed(headers, got["X-Amz-SignedHeaders"]),
        got["X-Amz-Date"],
    )
    if not hmac.compare_digest(expected, got["X-Amz-Signature"]):
        raise S3Error("SignatureDoesNotMatch")
    return Verified(access_key, None)


def _verify_header(
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    auth: str,
    region: str,
    secret_of: Callable[[str], str | None],
    now: datetime,
) -> Verified:
    fields = _header_fields(auth)
    access_key, day, secret = _credential(
        fields["Credential"],
        region,
        secret_of,
        "AuthorizationHeaderMalformed",
        "The authorization header is malformed;",
    )
    stamp = headers.get("x-amz-date")
    if stamp is None:
        raise S3Error(
            "AccessDenied",
            "AWS authentication requires a valid Date or x-amz-date header",
        )
    signed_at = _timestamp(stamp, query_form=False)
    if abs(now - signed_at) > MAX_SKEW:
        raise S3Error("RequestTimeTooSkewed")
    content = headers.get("x-amz-content-sha256")
    if content is None:
        raise S3Error(
            "InvalidRequest",
            "Missing required header for this request: x-amz-content-sha256",
        )
    if day != stamp[:8]:
        raise S3Error("SignatureDoesNotMatch")
    expected = _signature(
        S3SigV4Auth,
        access_key,
        secret,
        region,
        method,
        path,
        query,
        _signed(headers, fields["SignedHeaders"]),
        stamp,
    )
    if not hmac.compare_digest(expected, fields["Signature"]):
        raise S3Error("SignatureDoesNotMatch")
    return Verified(access_key, _payload_hash(content))


def _query_expires(got: dict[str, str]) -> int:
    """A presigned URL's X-Amz-Expires, once its parameters are all there and its
    algorithm is SigV4's."""
    missing = [
        k
        for k in (
            "X-Amz-Algorithm",
            "X-Amz-Credential",
            "X-Amz-Signature",
            "X-Amz-Date",
            "X-Amz-SignedHeaders",
            "X-Amz-Expires",
        )
        if k not in got
    ]
    if missing:
        raise S3Error(
            "AuthorizationQueryParametersError",
            "Query-string authentication version 4 requires the X-Amz-Algorithm, "
            "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
            "X-Amz-Expires parameters.",
        )
    if got["X-Amz-Algorithm"] != ALGORITHM:
        raise S3Error(
            "AuthorizationQueryParametersError",
            'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"',
        )
    try:
        expires = int(got["X-Amz-Expires"])
    except ValueError:
        raise S3Error(
            "AuthorizationQueryParametersError",
            "X-Amz-Expires should be a number",
        ) from None
    if expires < 0:
        raise S3Error(
            "AuthorizationQueryParametersError",
            "X-Amz-Expires must be non-negative",
        )
    if expires > MAX_EXPIRES:
        raise S3Error(
            "AuthorizationQueryParametersError",
            f"X-Amz-Expires must be less than a week (in seconds) that is {MAX_EXPIRES}",
        )
    return expires


def _header_fields(auth: str) -> dict[str, str]:
    """The Authorization header's Credential, SignedHeaders and Signature (SigV2 and other
    schemes refused as S3 refuses them)."""
    algorithm, _, rest = auth.strip().partition(" ")
    if algorithm == "AWS":
        raise _SIGV2
    if algorithm != ALGORITHM:
        raise S3Error(
            "InvalidArgument",
            "Unsupported Authorization Type",
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, _, value = part.strip().partition("=")
        fields[key] = value
    if not {"Credential", "SignedHeaders", "Signature"} <= set(fields):
        raise S3Error(
            "AuthorizationHeaderMalformed",
            "The authorization header is malformed; the authorization header requires three "
            "components: Credential, SignedHeaders, and Signature.",
        )
    return fields


def _payload_hash(content: str) -> str | None:
    """The payload's SHA-256 the request signed, None for an unsigned payload."""
    if content == UNSIGNED_PAYLOAD:
        return None
    if len(content) != 64 or any(c not in "0123456789abcdef" for c in content):
        raise S3Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a valid sha256 value.",
        )
    return content


def _timestamp(value: str, *, query_form: bool) -> datetime:
    try:
        return datetime.strptime(value, TIMESTAMP).replace(tzinfo=UTC)
    except ValueError:
        if query_form:
            raise S3Error(
                "AuthorizationQueryParametersError",
                "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"",
            ) from None
        raise S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        ) from None


def _signed(headers: Mapping[str, str], names: str) -> dict[str, str]:
    """The headers the client signed, as received (a name it lists but did not send is
    signed as empty, which will not match)."""
    return {n: headers.get(n, "") for n in names.split(";") if n}


def _signature(
    signer_class: type[S3SigV4Auth] | type[S3SigV4QueryAuth],
    access_key: str,
    secret_key: str,
    region: str,
    method: str,
    path: str,
    query: str,
    signed_headers: dict[str, str],
    stamp: str,
) -> str:
    """The signature botocore computes for this request (its canonical request, string to
    sign and signing key), the date being the one the client signed with."""
    signer = signer_class(Credentials(access_key, secret_key), "s3", region)
    host = signed_headers.get("host", "")
    url = f"http://{host}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=signed_headers)
    request.context["timestamp"] = stamp
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))


__all__ = ["MAX_EXPIRES", "UNSIGNED_PAYLOAD", "Verified", "verify"]
