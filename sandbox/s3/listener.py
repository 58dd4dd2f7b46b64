"""A site's artifact repository as an S3 endpoint speaking HTTP: one listener per repository
on 127.0.0.1 (an ephemeral port), path-style (`/<bucket>/<key>`), serving GetObject (with a
`Range`), PutObject, HeadObject, ListObjectsV2 (`prefix`) and DeleteObject on the bucket's
folder (`artifacts.Repository`), each request signed with SigV4 (`sigv4.py`).

A client reaches a repository by its endpoint name (the fleet file's `artifacts.endpoint`,
e.g. `s3.site-a.sandbox.invalid`) sent as the Host header, which the signature covers: S3
verifies with the Host it receives. A request may name the endpoint in an absolute target
(`GET http://s3.site-a.sandbox.invalid/site-a-artifacts/k`), as a client configured with the
listener as its HTTP proxy sends it (botocore's `Config(proxies={"http": <listener URL>})`).

Each listener serves from its own threads (one per connection), apart from the sandbox's
event loop and from the threads steps load and save with: a step blocked reading from a
repository cannot starve it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import tempfile
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from xml.sax.saxutils import escape

from sandbox.s3 import sigv4
from sandbox.s3.errors import S3Error

log = logging.getLogger("sandbox.s3")

CHUNK = 4 << 20
MAX_KEYS = 1000


class Store(Protocol):
    """What a listener serves from: the bucket's folder (`artifacts.Repository`)."""

    bucket: str

    def get_path(self, key: str) -> tuple[int, int] | None:
        """(an open descriptor of the object's file, its size), or None."""

    def put_file(self, key: str, path: Path, size: int) -> None: ...

    def delete_key(self, key: str) -> None: ...

    def list_keys(self, prefix: str) -> list[tuple[str, int]]: ...


@dataclass
class Endpoint:
    """One repository as its listener serves it."""

    site: str
    endpoint: str  # the name the signature's Host covers
    region: str
    store: Store  # the site's bucket
    secret_of: Callable[[str], str | None]
    # CreateBucket: a new bucket at this repository (None: the name is taken elsewhere).
    new_bucket: Callable[[str], Store | None]
    spool: Path  # where a PUT's body is spooled before it is stored
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None
    requests: dict[str, int] = field(default_factory=dict)
    others: dict[str, Store] = field(default_factory=dict)  # buckets created over S3

    def bucket(self, name: str) -> Store | None:
        return self.store if name == self.store.bucket else self.others.get(name)

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> None:
        endpoint = self

        class Handler(_Handler):
            repo = endpoint

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            name=f"s3-{self.site}",
            kwargs={"poll_interval": 0.5},
            daemon=True,
        )
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def describe(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "endpoint": self.endpoint,
            "bucket": self.store.bucket,
            "buckets": [self.store.bucket, *sorted(self.others)],
            "region": self.region,
            "url": self.url,
        }


class _Handler(BaseHTTPRequestHandler):
    repo: Endpoint
    protocol_version = "HTTP/1.1"
    rbufsize = CHUNK  # bodies come in large reads
    server_version = "AmazonS3"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.repo.endpoint, format % args)

    # -- dispatch ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        target = self.path
        if target.startswith(("http://", "https://")):
            # An absolute target (through a proxy): the path is what the signature covers.
            split = urllib.parse.urlsplit(target)
            target = split.path + (f"?{split.query}" if split.query else "")
        path, _, query = target.partition("?")
        resource = urllib.parse.unquote(path)
        request_id = secrets.token_hex(8).upper()
        body_read = False
        try:
            headers = {k.lower(): v for k, v in self.headers.items()}
            verified = sigv4.verify(
                method,
                path,
                query,
                headers,
                self.repo.region,
                self.repo.secret_of,
            )
            parts = resource.lstrip("/").split("/", 1)
            bucket, key = parts[0], (parts[1] if len(parts) > 1 else "")
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            self.repo.requests[method] = self.repo.requests.get(method, 0) + 1
            store = self.repo.bucket(bucket)
            if method == "PUT" and not key:
                self._create_bucket(bucket, store, request_id)
                return
            if store is None:
                raise S3Error("NoSuchBucket")
            if method == "PUT" and key:
                body_read = True
                self._put(store, key, verified.payload_sha256, request_id)
            elif method in ("GET", "HEAD") and key:
                self._get(store, key, method == "HEAD", request_id)
            elif method == "GET":
                self._list(store, params, request_id)
            elif method == "HEAD":
                self._send(200, b"", request_id, head=True)
            elif method == "DELETE" and key:
                store.delete_key(key)
                self._send(204, b"", request_id)
            else:
                raise S3Error("MethodNotAllowed")
        except S3Error as exc:
            if not body_read:
                self._drain()
            body = exc.xml(resource, request_id)
            self._send(exc.status, body, request_id, "application/xml", head=method == "HEAD")
        except OSError as exc:
            log.warning("%s %s: %s", method, resource, exc)
            err = S3Error("InternalError", "We encountered an internal error. Please try again.")
            self._send(500, err.xml(resource, request_id), request_id, "application/xml")

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        while length > 0:
            chunk = self.rfile.read(min(length, CHUNK))
            if not chunk:
                break
            length -= len(chunk)

    def _send(
        self,
        status: int,
        body: bytes,
        request_id: str,
        content_type: str = "application/xml",
        *,
        head: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("x-amz-request-id", request_id)
        if body or status not in (204, 304):
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    # -- operations --------------------------------------------------------------------------
    def _create_bucket(self, name: str, store: Store | None, request_id: str) -> None:
        self._drain()
        if store is not None:
            raise S3Error(
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already "
                "own it.",
                409,
            )
        made = self.repo.new_bucket(name)
        if made is None:
            raise S3Error(
                "BucketAlreadyExists",
                "The requested bucket name is not available. The bucket namespace is shared "
                "by all users of the system. Please select a different name and try again.",
                409,
            )
        self.repo.others[name] = made
        self._send(200, b"", request_id, extra={"Location": f"/{name}"})

    def _put(self, store: Store, key: str, expected: str | None, request_id: str) -> None:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise S3Error(
                "MissingContentLength", "You must provide the Content-Length HTTP header.", 411
            )
        length = int(length_header)
        digest = hashlib.sha256()
        self.repo.spool.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.repo.spool, prefix="put-")
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(left, CHUNK))
                    if not chunk:
                        raise S3Error(
                            "IncompleteBody",
                            "You did not provide the number of "
                            "bytes specified by the Content-Length HTTP header",
                            400,
                        )
                    digest.update(chunk)
                    out.write(chunk)
                    left -= len(chunk)
            if expected is not None and digest.hexdigest() != expected:
                raise S3Error("XAmzContentSHA256Mismatch")
            store.put_file(key, tmp, length)
        finally:
            tmp.unlink(missing_ok=True)
        # An opaque ETag (S3's is not an MD5 either for encrypted or multipart objects): the
        # body's SHA-256, already computed, cut to an MD5's length.
        self._send(200, b"", request_id, extra={"ETag": f'"{digest.hexdigest()[:32]}"'})

    def _get(self, store: Store, key: str, head: bool, request_id: str) -> None:
        found = store.get_path(key)
        if found is None:
            raise S3Error("NoSuchKey")
        fd, size = found
        with os.fdopen(fd, "rb") as f:
            start, end = 0, size - 1
            status = 200
            extra = {"Accept-Ranges": "bytes", "Last-Modified": self.date_time_string()}
            rng = self.headers.get("Range")
            if rng and not head:
                start, end = _range(rng, size)
                status = 206
                extra["Content-Range"] = f"bytes {start}-{end}/{size}"
            length = max(0, end - start + 1)
            self.send_response(status)
            self.send_header("x-amz-request-id", request_id)
            self.send_header("Content-Type", "binary/octet-stream")
            self.send_header("Content-Length", str(length))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            if head:
                return
            f.seek(start)
            left = length
            while left > 0:
                chunk = f.read(min(left, CHUNK))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def _list(self, store: Store, params: dict[str, str], request_id: str) -> None:
        prefix = params.get("prefix", "")
        try:
            max_keys = min(int(params.get("max-keys", MAX_KEYS)), MAX_KEYS)
        except ValueError:
            raise S3Error(
                "InvalidArgument", "Provided max-keys not an integer or within integer range"
            ) from None
        after = params.get("continuation-token") or params.get("start-after") or ""
        keys = [(k, s) for k, s in store.list_keys(prefix) if k > after]
        page, more = keys[:max_keys], len(keys) > max_keys
        items = "".join(
            f"<Contents><Key>{escape(k)}</Key><Size>{s}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
            for k, s in page
        )
        token = (
            f"<NextContinuationToken>{escape(page[-1][0])}</NextContinuationToken>"
            if (more and page)
            else ""
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(store.bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"
            f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>{token}{items}"
            "</ListBucketResult>"
        ).encode()
        self._send(200, body, request_id)


def _range(value: str, size: int) -> tuple[int, int]:
    """`bytes=a-b`, `bytes=a-` or `bytes=-n` (one range, as S3 serves)."""
    unit, _, spec = value.partition("=")
    first, _, last = spec.partition("-")
    with contextlib.suppress(ValueError):
        if unit.strip() == "bytes" and "," not in spec:
            if first == "":
                n = int(last)
                return max(0, size - n), size - 1
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
            if start < size and start <= end:
                return start, end
    raise S3Error("InvalidRange")


__all__ = ["Endpoint", "Store"]
