"""The contract's label keys come from one module."""

from __future__ import annotations

from placement import labels, parser
from placement.manifests import propagation_policy


def test_a_key_is_the_name_under_the_domain() -> None:
    assert labels.key("example.org", labels.SITE) == "example.org/site"


def test_the_parser_defaults_to_the_same_domain() -> None:
    # The parser still names its own default; the two must not drift apart.
    assert parser.DEFAULT_DOMAIN == labels.DEFAULT_DOMAIN


def test_manifests_spell_keys_under_the_given_domain() -> None:
    pp = propagation_policy("site-a", namespace="ns", domain="example.org")
    assert pp["metadata"]["labels"] == {"example.org/managed": "true", "example.org/site": "site-a"}
