from django.urls import re_path

from portal.ogcapi import views

# Paths as Part 1 writes them, without a trailing slash; one is accepted too.
urlpatterns = [
    re_path(r"^$", views.LandingPage.as_view(), name="ogcapi-landing"),
    re_path(r"^conformance/?$", views.Conformance.as_view(), name="ogcapi-conformance"),
    re_path(r"^api/?$", views.ApiDefinition.as_view(), name="ogcapi-api"),
    re_path(r"^processes/?$", views.ProcessList.as_view(), name="ogcapi-processes"),
    re_path(
        r"^processes/(?P<process_id>[^/]+)/?$",
        views.ProcessDescription.as_view(),
        name="ogcapi-process",
    ),
    re_path(
        r"^processes/(?P<process_id>[^/]+)/execution/?$",
        views.Execution.as_view(),
        name="ogcapi-execution",
    ),
    re_path(r"^jobs/?$", views.JobList.as_view(), name="ogcapi-jobs"),
    re_path(r"^jobs/(?P<job_id>[^/]+)/?$", views.Job.as_view(), name="ogcapi-job"),
    re_path(
        r"^jobs/(?P<job_id>[^/]+)/results/?$", views.JobResults.as_view(), name="ogcapi-results"
    ),
]
