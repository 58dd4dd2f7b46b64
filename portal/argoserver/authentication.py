"""``Authorization: Bearer <portal token>``, the form Hera, the argo CLI (``ARGO_TOKEN``) and
the argo-workflows SDK send, beside the portal's own ``Token`` scheme: the same tokens, the
same per-process cache and the same count of failures per address."""

from __future__ import annotations

from portal.api.authentication import CachedTokenAuthentication


class BearerTokenAuthentication(CachedTokenAuthentication):
    keyword = "Bearer"
