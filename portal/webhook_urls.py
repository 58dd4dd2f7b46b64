from django.urls import path

from portal import webhook

urlpatterns = [
    path("placement/", webhook.placement, name="webhook-placement"),
    path("placement/<str:token>/", webhook.placement, name="webhook-placement-token"),
]
