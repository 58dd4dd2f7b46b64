"""Browser pages (server-rendered, HTMX partials under templates/portal/htmx/)."""

from django.urls import path

from portal import views

urlpatterns = [
    path("", views.run_list, name="home"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/live/", views.run_live, name="run-live"),
    path("runs/<int:pk>/decisions/", views.run_decisions, name="run-decisions"),
    path("runs/<int:pk>/stop/", views.run_stop, name="run-stop"),
    path("runs/<int:pk>/retry/", views.run_retry, name="run-retry"),
    path("runs/<int:pk>/resubmit/", views.run_resubmit, name="run-resubmit"),
    path("submit/", views.submit, name="submit"),
    path("submit/preview/", views.submit_preview, name="submit-preview"),
    path("submit/parameters/", views.submit_parameters, name="submit-parameters"),
    path("fleet/", views.fleet, name="fleet"),
    path("fleet/sites/<str:name>/", views.site_detail, name="site-detail"),
    path("fleet/sites/<str:name>/cordon/", views.site_cordon, name="site-cordon"),
]
