"""The portal's own 404 page, also with ``DEBUG`` on; and its icon at ``/favicon.ico``.

The demo runs with ``DEBUG=1`` (static files from the source tree, readable errors in the
worker), and Django then answers a URL nothing matches, or a view's ``Http404``, with its
technical page: the project's URL patterns, settings hints, "You're seeing this error because
you have DEBUG = True". A person following a stale link sees that as a broken site. With
``DEBUG`` on, this middleware answers those with ``templates/404.html``, the page Django itself
renders with ``DEBUG`` off. API views answer their own 404s (JSON) and are not touched."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.templatetags.static import static


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page says (JSON answers, the API docs)."""
    response = HttpResponseRedirect(static("portal/favicon.svg"))
    response["Cache-Control"] = "max-age=86400"
    return response


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "404.html", {"request_path": request.path}, status=404)


class PlainNotFoundMiddleware:
    """Inside ``CommonMiddleware``, so a path missing its slash is still redirected."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # No resolver match: no URL pattern took the path (Django's technical 404 under DEBUG).
        if settings.DEBUG and response.status_code == 404 and request.resolver_match is None:
            return not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if settings.DEBUG and isinstance(exception, Http404):
            return not_found(request, exception)
        return None
