"""Browser pages (server-rendered, HTMX partials under templates/portal/htmx/)."""

from django.urls import path

from portal import views

urlpatterns = [
    path("", views.run_list, name="home"),
    path("runs/", views.run_list, name="ui-run-list"),
    path("runs/<int:pk>/", views.run_detail, name="ui-run-detail"),
    path("runs/<int:pk>/live/", views.run_live, name="ui-run-live"),
    path("runs/<int:pk>/cost/", views.run_cost_panel, name="ui-run-cost"),
    path("runs/<int:pk>/decisions/", views.run_decisions, name="ui-run-decisions"),
    path("runs/<int:pk>/stop/", views.run_stop, name="ui-run-stop"),
    path("runs/<int:pk>/retry/", views.run_retry, name="ui-run-retry"),
    path("runs/<int:pk>/resubmit/", views.run_resubmit, name="ui-run-resubmit"),
    path("runs/<int:pk>/resume/", views.run_resume, name="ui-run-resume"),
    path("runs/<int:pk>/units/<str:key>/", views.unit_panel, name="ui-unit-detail"),
    path("runs/<int:pk>/units/<str:key>/logs/", views.unit_logs, name="ui-unit-logs"),
    path("runs/<int:pk>/units/<str:key>/outputs/", views.unit_output, name="ui-unit-output"),
    path("submit/", views.submit, name="ui-submit"),
    path("submit/preview/", views.submit_preview, name="ui-submit-preview"),
    path("submit/parameters/", views.submit_parameters, name="ui-submit-parameters"),
    path("fleet/", views.fleet, name="ui-fleet"),
    path("fleet/sites/<str:name>/", views.site_detail, name="ui-site-detail"),
    path("fleet/sites/<str:name>/cordon/", views.site_cordon, name="ui-site-cordon"),
]
