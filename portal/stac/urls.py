from django.urls import re_path

from portal.stac import views

urlpatterns = [
    re_path(r"^$", views.LandingPage.as_view(), name="stac-landing"),
    re_path(r"^conformance/?$", views.Conformance.as_view(), name="stac-conformance"),
    re_path(r"^collections/?$", views.CollectionList.as_view(), name="stac-collections"),
    re_path(
        r"^collections/(?P<collection_id>[^/]+)/?$",
        views.CollectionDetail.as_view(),
        name="stac-collection",
    ),
    re_path(
        r"^collections/(?P<collection_id>[^/]+)/items/?$",
        views.ItemList.as_view(),
        name="stac-items",
    ),
    re_path(
        r"^collections/(?P<collection_id>[^/]+)/items/(?P<item_id>[^/]+)/?$",
        views.ItemDetail.as_view(),
        name="stac-item",
    ),
    re_path(r"^search/?$", views.Search.as_view(), name="stac-search"),
]
