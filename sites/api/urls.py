from rest_framework.routers import SimpleRouter

from sites.api import views

router = SimpleRouter()
router.register("sites", views.SiteViewSet, basename="site")
router.register("datasets", views.DatasetViewSet, basename="dataset")
urlpatterns = router.urls
