"""The guides: every relative link and anchor resolves; manifests, compose and the API guide
name only settings and paths that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.deploy.helpers import (
    COMPOSE,
    DEPLOY,
    DOCUMENTS,
    REPO,
)

# The guides: every relative link and anchor resolves

GUIDES = [REPO / "README.md", DEPLOY / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings in code
    return {github_anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_anchor_rule_matches_github() -> None:
    assert github_anchor("3. Each member cluster (site)") == "3-each-member-cluster-site"
    assert github_anchor("Reading `/readyz`") == "reading-readyz"


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_in_the_guides_resolves(guide: Path) -> None:
    assert guide.exists()
    broken = []
    for target in _LINK.findall(guide.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        path = (guide.parent / file_part).resolve() if file_part else guide
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(target)
    assert broken == []


def settings_names() -> set[str]:
    """The variables .env.example documents (every one the settings read)."""
    text = (REPO / ".env.example").read_text()
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)=", text, flags=re.M))


def test_the_manifests_and_compose_set_only_settings_that_exist() -> None:
    known = settings_names()
    assert {"DATABASE_URL", "KARMADA_KUBECONFIG"} <= known
    config = next(d for p, _, d in DOCUMENTS if p == "deploy/host/configmap.yaml")
    assert set(config["data"]) - known == set()  # a typo would be silently ignored
    compose_env = yaml.safe_load(COMPOSE.read_text())["x-portal"]["environment"]
    assert set(compose_env) - known == set()
    # The Secret the Deployments read (created by hand, see deploy/README.md).
    readme = (DEPLOY / "README.md").read_text()
    secret_keys = set(re.findall(r"--from-literal=([A-Z_]+)=", readme))
    assert secret_keys and secret_keys - known == set()


def test_the_api_guide_covers_every_path_of_the_schema() -> None:
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    guide = (REPO / "docs" / "api.md").read_text()
    assert len(paths) >= 10
    assert [p for p in paths if p.startswith("/api/") and p not in guide] == []
