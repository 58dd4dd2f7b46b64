"""Argo Server's paths, mounted at ``/argo/`` (see ``portal.urls``)."""

from django.urls import path, re_path

from portal.argoserver import templates, views

workflows = [
    path("api/v1/workflows/<str:namespace>", views.WorkflowsView.as_view()),
    path("api/v1/workflows/<str:namespace>/lint", views.WorkflowLintView.as_view()),
    path("api/v1/workflows/<str:namespace>/<str:name>", views.WorkflowView.as_view()),
    re_path(
        r"^api/v1/workflows/(?P<namespace>[^/]+)/(?P<name>[^/]+)/"
        r"(?P<action>stop|terminate|suspend|resume|retry|resubmit)$",
        views.WorkflowActionView.as_view(),
    ),
    path("api/v1/workflows/<str:namespace>/<str:name>/log", views.WorkflowLogView.as_view()),
    path(
        "api/v1/workflows/<str:namespace>/<str:name>/<str:pod>/log",
        views.WorkflowLogView.as_view(),
    ),
    path("api/v1/workflow-events/<str:namespace>", views.WorkflowEventsView.as_view()),
    path("api/v1/info", views.InfoView.as_view()),
    path("api/v1/version", views.VersionView.as_view()),
    path("api/v1/userinfo", views.UserInfoView.as_view()),
]

urlpatterns = [
    *workflows,
    path("api/v1/workflow-templates/<str:namespace>", templates.WorkflowTemplatesView.as_view()),
    path(
        "api/v1/workflow-templates/<str:namespace>/<str:name>",
        templates.WorkflowTemplateView.as_view(),
    ),
]
