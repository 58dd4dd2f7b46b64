"""Browser pages (server-rendered, HTMX partials under templates/portal/htmx/)."""

from django.urls import path

from portal import views

urlpatterns = [
    path("", views.home, name="home"),
]
