"""``Authorization: Bearer <key>``: the API token under the keyword OAuth-style clients send
(OWSLib, pystac-client, generated OpenAPI clients). The same tokens, cache and failure count
as ``Token <key>`` (``CachedTokenAuthentication``)."""

from __future__ import annotations

from portal.api.authentication import CachedTokenAuthentication


class BearerTokenAuthentication(CachedTokenAuthentication):
    keyword = "Bearer"


# What the OGC API and STAC faces accept: the token either way, or a browser session.
FACE_AUTHENTICATION = [
    CachedTokenAuthentication,
    BearerTokenAuthentication,
]
