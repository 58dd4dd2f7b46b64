from rest_framework.routers import SimpleRouter

from portal.api.views import WorkflowRunViewSet

router = SimpleRouter()
router.register("runs", WorkflowRunViewSet, basename="run")
urlpatterns = router.urls
