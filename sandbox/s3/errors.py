"""S3's error answers: the code, the HTTP status and the message S3 gives for each, and the XML
body it sends (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html):

    <?xml version="1.0" encoding="UTF-8"?>
    <Error>
      <Code>NoSuchKey</Code>
      <Message>The resource you requested does not exist</Message>
      <Resource>/mybucket/myfoto.jpg</Resource>
      <RequestId>4442587FB7D0A2F9</RequestId>
    </Error>
"""

from __future__ import annotations

import secrets
from xml.sax.saxutils import escape

# code: (HTTP status, S3's message), from the error code list of the page above.
CODES: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied"),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (
        400,
        "Error parsing the X-Amz-Credential parameter.",
    ),
    "InvalidAccessKeyId": (
        403,
        "The AWS Access Key Id you provided does not exist in our records.",
    ),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "NoSuchBucket": (404, "The specified bucket does not exist"),
    "NoSuchKey": (404, "The specified key does not exist."),
    "RequestTimeTooSkewed": (
        403,
        "The difference between the request time and the current time is too large.",
    ),
    "SignatureDoesNotMatch": (
        403,
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
    ),
    "XAmzContentSHA256Mismatch": (
        400,
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
    ),
    # MinIO's answer to a write past a bucket's quota (cmd/api-errors.go):
    #   ErrAdminBucketQuotaExceeded: {Code: "XMinioAdminBucketQuotaExceeded",
    #       Description: "Bucket quota exceeded", HTTPStatusCode: http.StatusBadRequest,
    "XMinioAdminBucketQuotaExceeded": (400, "Bucket quota exceeded"),
}


class S3Error(Exception):
    """An S3 error answer: `code`, `message`, HTTP `status`."""

    def __init__(self, code: str, message: str | None = None, status: int | None = None) -> None:
        known = CODES.get(code, (500, code))
        self.code = code
        self.message = message if message is not None else known[1]
        self.status = status if status is not None else known[0]
        super().__init__(f"{self.message} ({self.code})")

    def xml(self, resource: str, request_id: str | None = None) -> bytes:
        rid = request_id or secrets.token_hex(8).upper()
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{escape(self.code)}</Code><Message>{escape(self.message)}</Message>"
            f"<Resource>{escape(resource)}</Resource><RequestId>{rid}</RequestId></Error>"
        ).encode()


def parse_error(body: bytes, status: int) -> S3Error:
    """The S3Error an error body describes (or one named by the HTTP status alone, as a HEAD's
    answer has no body)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(body)
        code = root.findtext("Code") or ""
        message = root.findtext("Message")
    except ET.ParseError:
        code, message = "", None
    if not code:
        code = {403: "AccessDenied", 404: "NoSuchKey", 400: "InvalidRequest"}.get(status, "")
        code = code or f"HTTP{status}"
    return S3Error(code, message, status)
