"""The login page (and the admin's), with failed attempts throttled (portal/throttling.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse

from portal import throttling


class ThrottledLoginView(auth_views.LoginView):
    """Django's LoginView; an address with too many recent failures, or a username with too
    many from that address, gets the page again with 429 and a ``Retry-After`` header, and its
    password is not even checked."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = str(request.POST.get("username", ""))[:150]
        wait = throttling.retry_after(throttling.client_address(request), username)
        if wait is not None:
            # An unbound form: a bound one would check the password as soon as it is shown.
            form = self.get_form_class()(self.request)
            context = self.get_context_data(form=form, throttled=throttling.message(wait))
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        username = str(self.request.POST.get("username", ""))[:150]
        throttling.record_failure(throttling.client_address(self.request), username)
        return super().form_invalid(form)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        throttling.reset_user(
            throttling.client_address(self.request), form.get_user().get_username()
        )
        return super().form_valid(form)


def throttled_admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's own login view, behind the same count: a POST that answers 200 (the form
    again, with errors) is a failure; a redirect is a login."""
    address = throttling.client_address(request)
    username = str(request.POST.get("username", ""))[:150] if request.method == "POST" else ""
    if request.method == "POST":
        wait = throttling.retry_after(address, username)
        if wait is not None:
            response = HttpResponse(
                throttling.message(wait), status=429, content_type="text/plain; charset=utf-8"
            )
            response["Retry-After"] = str(wait)
            return response
    from django.contrib import admin

    response = admin.site.login(request)
    if request.method == "POST":
        if response.status_code == 200:
            throttling.record_failure(address, username)
        elif response.status_code == 302 and username:
            throttling.reset_user(address, username)
    return response
