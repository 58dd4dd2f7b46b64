from rest_framework.routers import SimpleRouter

from placement.api import views

router = SimpleRouter()
router.register("rules", views.PlacementRuleViewSet, basename="rule")
urlpatterns = router.urls
