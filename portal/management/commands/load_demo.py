"""Load the demo fleet of DESIGN section 9. Idempotent: running it twice gives the same data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from placement import parser
from placement.demo import ARTIFACT_STORES, artifacts_reachable, repository_proxies
from placement.models import PlacementRule
from portal import services
from portal.api_tokens import api_token_create
from portal.models import WorkflowTemplate
from sites.models import Project, Site, SiteLink
from sites.stac_import import catalogue_import

GIB = 1024**3
EXAMPLES = Path(settings.BASE_DIR) / "examples"
# The demo pipeline in the catalogue: the one process of the demo's OGC API.
DEMO_TEMPLATE = "eo-pipeline"
DEMO_PASSWORD = "portal-demo"

SITES: list[dict[str, Any]] = [
    {
        "name": "site-a",
        "region": "eu-west",
        "zone": "eu-west-1a",
        "provider": "onprem",
        "labels": {"tier": "archive", "topology.kubernetes.io/region": "eu-west"},
        "capabilities": ["archive"],
        "cpu_allocatable": 16000,
        "cpu_allocated": 12000,
        "memory_allocatable": 64 * GIB,
        "memory_allocated": 32 * GIB,
        "pods_allocatable": 110,
    },
    {
        "name": "site-b",
        "region": "eu-west",
        "zone": "eu-west-1b",
        "provider": "cloud",
        "labels": {"tier": "compute", "topology.kubernetes.io/region": "eu-west"},
        "capabilities": ["general-compute"],
        "cpu_allocatable": 64000,
        "memory_allocatable": 256 * GIB,
        "pods_allocatable": 500,
    },
    {
        "name": "site-c",
        "region": "eu-central",
        "zone": "eu-central-1a",
        "provider": "hpc",
        "labels": {
            "tier": "gpu",
            "accelerator": "nvidia-a100",
            "topology.kubernetes.io/region": "eu-central",
        },
        "capabilities": ["gpu", "nvidia-a100"],
        "cpu_allocatable": 32000,
        "memory_allocatable": 256 * GIB,
        "gpu_allocatable": 8,
        "pods_allocatable": 200,
    },
]

# (source, target, Mbit/s, cost per GB, latency ms). site-a -> site-b is the fast path.
LINKS = [
    ("site-a", "site-b", 10000, "0.00", 2),
    ("site-b", "site-a", 10000, "0.00", 2),
    ("site-a", "site-c", 1000, "0.02", 15),
    ("site-c", "site-a", 1000, "0.02", 15),
    ("site-b", "site-c", 5000, "0.01", 12),
    ("site-c", "site-b", 5000, "0.01", 12),
]

RULES: list[dict[str, Any]] = [
    {
        "name": "ingest-near-data",
        "order": 10,
        "description": "Read the archive where it lives: ingest goes to a site holding the data.",
        "selector": {"task": "ingest*"},
        "timing": "submit",
        "effect": "prefer_data_locality",
        "parameters": {},
        "weight": 10.0,
    },
    {
        "name": "preprocess-at-runtime",
        "order": 20,
        "description": "Preprocessing is placed when it starts, where ingest's output is and "
        "CPU is free.",
        "selector": {"task": "preprocess*"},
        "timing": "runtime",
        "effect": "prefer_free_capacity",
        "parameters": {},
        "weight": 5.0,
    },
    {
        "name": "inference-on-gpu",
        "order": 30,
        "description": "Model inference needs an accelerator.",
        "selector": {"task": "inference*"},
        "timing": "submit",
        "effect": "require_capabilities",
        "parameters": {"capabilities": ["gpu"]},
        "weight": 1.0,
    },
]


class Command(BaseCommand):
    help = "Load the demo fleet: three sites, their links, the input dataset, rules, a user."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--sandbox",
            default="",
            help="URL of the sandbox fleet: its repositories' listeners become the proxies the "
            "portal reaches them through",
        )

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        admin, created = user_model.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            admin.set_password(DEMO_PASSWORD)
            admin.save()
        scientist, created = user_model.objects.get_or_create(username="scientist")
        if created:
            scientist.set_password(DEMO_PASSWORD)
            scientist.save()
        project, _ = Project.objects.update_or_create(
            name="eo-demo", defaults={"description": "Earth Observation demo project"}
        )
        project.members.add(scientist, admin)

        proxies = repository_proxies(options["sandbox"]) if options.get("sandbox") else {}
        sites = _load_sites(proxies)
        # The datasets from the demo's STAC catalogue, as an operator loads their own.
        datasets = catalogue_import(source=str(EXAMPLES / "stac" / "catalog.json"))
        template_register(EXAMPLES / "eo-pipeline.yaml", DEMO_TEMPLATE)
        for rule in RULES:
            PlacementRule.objects.update_or_create(
                name=rule["name"], defaults={k: v for k, v in rule.items() if k != "name"}
            )
        # Keys are stored hashed and shown once: each load gives the scientist a new one.
        key = api_token_create(user=scientist, replace=True)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo fleet loaded: {len(sites)} sites, {len(LINKS)} links, "
                f"{len(datasets.changes)} datasets, the WorkflowTemplate {DEMO_TEMPLATE}, "
                f"{len(RULES)} rules. Login: scientist / {DEMO_PASSWORD} (admin: admin / "
                f"{DEMO_PASSWORD}). API token: {key}"
            )
        )


def _load_sites(proxies: dict[str, str]) -> dict[str, Site]:
    """The demo fleet's sites and links, by site name; ``proxies``: each repository's HTTP
    proxy for the control plane, by site."""
    sites: dict[str, Site] = {}
    for spec in SITES:
        fields = {k: v for k, v in spec.items() if k != "name"}
        site, created = Site.objects.get_or_create(
            name=spec["name"], defaults={**fields, "ready": True}
        )
        if not created:
            # Keep what the watcher synced from Karmada (capacity, readiness); reset the
            # descriptive fields the scenario depends on.
            for key in ("region", "zone", "provider", "labels", "capabilities"):
                setattr(site, key, spec[key])
        site.overrides = {
            **(site.overrides or {}),
            "artifact_store": {
                **ARTIFACT_STORES[site.name],
                **({"proxy": proxies[site.name]} if site.name in proxies else {}),
            },
        }
        site.save()
        sites[site.name] = site
    for source, target, mbps, cost, latency in LINKS:
        SiteLink.objects.update_or_create(
            source=sites[source],
            target=sites[target],
            defaults={
                "bandwidth_mbps": mbps,
                "cost_per_gb": cost,
                "latency_ms": latency,
                # Which site reads which repository: the fleet file's `readableFrom`.
                "artifacts_reachable": artifacts_reachable(source, target),
            },
        )
    return sites


def template_register(path: Path, name: str) -> None:
    """The Workflow at ``path`` as the catalogue's WorkflowTemplate ``name`` (replaced each
    time: the file is the truth), fleet-wide."""
    doc = yaml.safe_load(path.read_text())
    meta = {k: v for k, v in doc.get("metadata", {}).items() if k != "generateName"}
    manifest = {**doc, "kind": "WorkflowTemplate", "metadata": {**meta, "name": name}}
    entry = parser.parse_workflow_template(manifest, services.parser_limits())
    WorkflowTemplate.objects.update_or_create(
        name=name, project=None, defaults={"manifest": dict(entry.document)}
    )
