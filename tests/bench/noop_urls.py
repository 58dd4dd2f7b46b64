"""The portal's URLs plus ``POST /bench/noop/``: reads the body and answers a fixed
AdmissionReview (allowed, no patch), the cheapest answer a webhook can give."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

ANSWER = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "response": {"uid": "noop", "allowed": True},
}


@csrf_exempt
@require_POST
def noop(request: HttpRequest) -> HttpResponse:
    request.read()
    return JsonResponse(ANSWER)


urlpatterns = [
    path("bench/noop/", noop),
    path("", include("portal.urls")),
]
