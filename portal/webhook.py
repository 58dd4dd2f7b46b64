"""``POST /webhooks/placement/``: the runtime placement admission webhook.

A plain typed function view (as healthchecks' ``hc/api/views.py``): authenticate, bound the body,
hand it to ``portal.admission.decide`` and answer its AdmissionReview.

Authentication: karmada-apiserver's ``clientConfig.url`` cannot send headers, so the token is
a path segment (``/webhooks/placement/<token>/``); other callers may send
``Authorization: Bearer <token>`` instead. Both are compared in constant time with
``PORTAL_WEBHOOK_TOKEN``. With no token configured the webhook is open only when ``DEBUG`` (the
embedded demo); otherwise it refuses everything (403), so a production deployment that forgot
the token fails closed, and Karmada's ``failurePolicy: Ignore`` lets the fallback policy place.
TLS is terminated in front of Django (ingress, or ``gunicorn --certfile --keyfile``); the CA
that signed that certificate goes into ``PORTAL_WEBHOOK_CA_BUNDLE`` (base64 PEM) and from there
into the configuration's ``caBundle``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from portal.admission.decide import NotAdmissionReview, admission_review

log = logging.getLogger(__name__)

# An AdmissionReview wraps one object, which etcd caps at 1.5 MiB; leave room for the envelope.
MAX_BODY_BYTES = 3 * 1024 * 1024


def _authorised(request: HttpRequest, path_token: str | None) -> int | None:
    """None when the caller may proceed, else the status to answer (401 or 403)."""
    expected = settings.PORTAL_WEBHOOK_TOKEN
    given = path_token
    if given is None:
        # request.META, not request.headers: that builds a dict of every header on first use,
        # and this is the admission's hot path.
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            given = value.strip()
    if not expected:
        return None if settings.DEBUG else 403
    if given is None:
        return 401
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return 403
    return None


def _error(status: int, message: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="placement-webhook"'
    return response


@csrf_exempt
@require_POST
def placement(request: HttpRequest, token: str | None = None) -> HttpResponse:
    started = time.monotonic()
    refused = _authorised(request, token)
    if refused is not None:
        log.warning("placement webhook: refused a caller from %s", request.META.get("REMOTE_ADDR"))
        return _error(refused, "a valid webhook token is required")
    try:
        # META, not request.headers: building the headers map costs more than the rest here.
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES:
        return _error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    # Read the stream ourselves, bounded: ``request.body`` would apply the form upload limit.
    body = request.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        return _error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        review = admission_review(body=body, started=started)
    except NotAdmissionReview as exc:
        return _error(400, f"not an AdmissionReview: {exc}")
    # Encoded here once, without the Django encoder JsonResponse would set up for types an
    # AdmissionReview never holds.
    return HttpResponse(json.dumps(review, separators=(",", ":")), content_type="application/json")
