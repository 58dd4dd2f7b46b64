from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from portal import health, notfound
from portal.argoserver import urls as argo_urls
from portal.auth_views import ThrottledLoginView, throttled_admin_login

admin.site.site_header = "Multi-site workflow portal: administration"
admin.site.site_title = "Multi-site workflow portal"
admin.site.index_title = "Sites, datasets, rules and runs"

api_v1 = [
    path("", include("sites.api.urls")),
    path("", include("placement.api.urls")),
    path("", include("portal.api.urls")),
]

urlpatterns = [
    # Machine endpoints first: the admission webhook is the hottest URL, and every pattern
    # tried before it is paid on each admission.
    path("webhooks/", include("portal.webhook_urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("", include("portal.ui_urls")),
    # Browsers ask for /favicon.ico whatever the page says (JSON answers, the API docs).
    path("favicon.ico", notfound.favicon, name="favicon"),
    path("login/", ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The admin's login form, behind the same count of failures.
    path("admin/login/", throttled_admin_login, name="admin-login-throttled"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("ogcapi/", include("portal.ogcapi.urls")),
    path("stac/", include("portal.stac.urls")),
    # Argo Server's HTTP API (Hera, the argo CLI, the argo-workflows SDK). Its workflow paths
    # also answer at the root, where nothing of the portal's collides with them: Hera joins
    # its host and each path with urljoin, which drops a last segment without a slash, so a
    # host of "<portal>/argo" reaches "/api/v1/workflows/...".
    path("argo/", include(argo_urls)),
    path("", include(argo_urls.workflows)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
]
