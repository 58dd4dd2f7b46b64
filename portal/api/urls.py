from rest_framework.routers import SimpleRouter

from portal.api.views import WorkflowRunViewSet
from portal.api.workflow_templates import WorkflowTemplateViewSet

router = SimpleRouter()
router.register("runs", WorkflowRunViewSet, basename="run")
router.register("workflow-templates", WorkflowTemplateViewSet, basename="workflow-template")
urlpatterns = router.urls
