from django.urls import path
from rest_framework.routers import SimpleRouter

from portal.api.views import WorkflowRunViewSet
from portal.api.workflow_templates import WorkflowTemplateViewSet
from portal.quotas.api import PriorityClassViewSet, QuotaViewSet, UsageView

router = SimpleRouter()
router.register("runs", WorkflowRunViewSet, basename="run")
router.register("workflow-templates", WorkflowTemplateViewSet, basename="workflow-template")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("priority-classes", PriorityClassViewSet, basename="priority-class")
urlpatterns = [*router.urls, path("usage/", UsageView.as_view(), name="usage")]
