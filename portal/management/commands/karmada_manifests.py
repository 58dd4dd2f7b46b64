"""``python manage.py karmada_manifests``: every object the portal expects on karmada-apiserver
(per-site PropagationPolicies and OverridePolicies, the fallback policy, the webhook
configuration), as one YAML stream for ``kubectl apply -f -``."""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand

from placement import manifests
from portal.controller.sync import webhook_url
from sites.models import Site


def expected_objects() -> list[dict[str, Any]]:
    return manifests.karmada_manifests(
        list(Site.objects.values_list("name", "overrides")),
        namespace=settings.KARMADA_NAMESPACE,
        webhook_url=webhook_url(),
        ca_bundle=settings.PORTAL_WEBHOOK_CA_BUNDLE or None,
        domain=settings.PORTAL_LABEL_DOMAIN,
        prefix=settings.PORTAL_POLICY_PREFIX,
    )


class Command(BaseCommand):
    help = "Print the Karmada objects the portal expects (policies, overrides, webhook)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--namespace-object",
            action="store_true",
            help="also print the Namespace the step workflows live in",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        objects = expected_objects()
        if options["namespace_object"]:
            ns = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": settings.KARMADA_NAMESPACE},
            }
            objects = [ns, *objects]
        self.stdout.write(yaml.safe_dump_all(objects, sort_keys=False), ending="")
