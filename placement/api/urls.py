from rest_framework.routers import SimpleRouter

from placement.api import revisions, views

router = SimpleRouter()
router.register("rules", views.PlacementRuleViewSet, basename="rule")
router.register("rule-revisions", revisions.RuleRevisionViewSet, basename="rule-revision")
urlpatterns = router.urls
