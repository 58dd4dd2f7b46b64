"""The pure parts of the sandbox, without a server."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import quantity
from sandbox.argo.expr import evaluate
from sandbox.errors import ApiError
from sandbox.fleet import Site, parse_limit_range
from sandbox.karmada.overrides import override_image
from sandbox.karmada.policy import choose_policy
from sandbox.patch import json_patch, merge_patch
from sandbox.resources import CONFIG_MAP, NAMESPACE, Registry
from sandbox.selectors import parse_label_selector
from sandbox.store import Store, Watcher

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(max_size=3), json_values, max_size=4))
def test_merge_patch_with_itself_is_identity_when_no_nulls(doc: dict[str, object]) -> None:
    def strip(v: object) -> object:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        return v

    clean = strip(doc)
    assert merge_patch(clean, clean) == clean


def test_merge_patch_deletes_with_null_and_replaces_lists() -> None:
    assert merge_patch({"a": 1, "b": {"c": 2, "d": 3}, "l": [1]}, {"b": {"c": None}, "l": [2]}) == {
        "a": 1,
        "b": {"d": 3},
        "l": [2],
    }


def test_json_patch_ops_and_errors() -> None:
    doc = {"a": {"b": [1, 2]}, "x/y": 1}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/b/-", "value": 3},
            {"op": "replace", "path": "/x~1y", "value": 2},
            {"op": "remove", "path": "/a/b/0"},
            {"op": "test", "path": "/a/b/0", "value": 2},
        ],
    )
    assert out == {"a": {"b": [2, 3]}, "x/y": 2}
    assert doc == {"a": {"b": [1, 2]}, "x/y": 1}
    with pytest.raises(ApiError) as err:
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
    assert err.value.code == 422


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a in (1, 2)", {"a": "2"}, True),
        ("a notin (1,2)", {"a": "2"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": "1"}, False),
        ("a=1,b", {"a": "1"}, False),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector)(labels) is expected


def test_a_bad_label_selector_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector("a in b")
    assert err.value.code == 400


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("heads == heads", True),
        ("heads == tails", False),
        ("5 < 10", True),
        ("'a b' == 'a b'", True),
        ("true && !false", True),
        ("(1 > 2) || hello =~ 'ell'", True),
        ("10 >= 9 && 2 != 2", False),
    ],
)
def test_when_expressions(expr: str, expected: bool) -> None:
    assert evaluate(expr) is expected


def test_depends_expressions_resolve_task_words() -> None:
    states = {"A": True, "B.Failed": False, "C": True}
    assert evaluate("A && (B.Failed || C)", states.__getitem__) is True
    assert evaluate("A && B.Failed", states.__getitem__) is False


def test_quantities_round_trip() -> None:
    assert quantity.parse("500m") == 0.5 and quantity.parse("2Gi") == 2 * 2**30
    assert quantity.fmt("cpu", 1.5) == "1500m" and quantity.fmt("cpu", 4) == "4"
    assert quantity.fmt("memory", 3 * 2**30) == "3Gi"


def test_image_overrider_components() -> None:
    over = {"component": "Registry", "operator": "replace", "value": "mirror.io"}
    assert (
        override_image("docker.io/library/busybox:1.36", over) == "mirror.io/library/busybox:1.36"
    )
    assert (
        override_image("busybox", {"component": "Tag", "operator": "replace", "value": "v2"})
        == "busybox:v2"
    )


def _policy(
    name: str, ns: str | None, priority: int, selector: dict[str, object]
) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {
        "kind": "PropagationPolicy" if ns else "ClusterPropagationPolicy",
        "metadata": meta,
        "spec": {
            "priority": priority,
            "resourceSelectors": [
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", **selector}
            ],
        },
    }


def test_policy_choice_orders_priority_precision_then_name() -> None:
    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"x": "1"}},
    }
    by_label = _policy("b-label", "ns", 0, {"labelSelector": {"matchLabels": {"x": "1"}}})
    by_name = _policy("c-name", "ns", 0, {"name": "w"})
    catch_all = _policy("a-all", "ns", 0, {})
    assert choose_policy([catch_all, by_label, by_name], [], wf) is by_name
    assert choose_policy([catch_all, by_label], [], wf) is by_label
    high = _policy("z-high", "ns", 5, {})
    assert choose_policy([by_name, high], [], wf) is high
    cluster_wide = _policy("cpp", None, 100, {"name": "w"})
    assert choose_policy([catch_all], [cluster_wide], wf) is catch_all
    assert choose_policy([], [cluster_wide], wf) is cluster_wide


def test_the_event_log_is_bounded_and_old_versions_expire() -> None:
    async def scenario() -> None:
        store = Store(Registry(), event_log_size=10)
        first_rv = store.rv
        for i in range(100):
            store.create(NAMESPACE, {"metadata": {"name": f"ns-{i}"}})
        assert len(store.logs[NAMESPACE.key]) == 10
        assert len(store.events_since(NAMESPACE, store.rv - 5)) == 5
        with pytest.raises(ApiError) as err:
            store.events_since(NAMESPACE, first_rv)
        assert err.value.code == 410 and err.value.reason == "Expired"

    asyncio.run(scenario())


def test_the_whole_reference_folder_can_be_given_as_crds() -> None:
    from sandbox.schema import SchemaRegistry
    from tests.fixtures_sandbox import REFERENCE

    schemas = SchemaRegistry()
    schemas.load([REFERENCE])
    kinds = {(g, k) for g, _v, k in schemas.kinds()}
    assert {
        ("argoproj.io", "Workflow"),
        ("policy.karmada.io", "PropagationPolicy"),
        ("work.karmada.io", "ResourceBinding"),
    } <= kinds


def test_a_watch_buffers_its_own_resource_only() -> None:
    # kube-apiserver keeps one cacher per resource: a burst of other kinds' events (a
    # fan-out's Workflows and Works) never fills a binding or Cluster watch's buffer.
    async def scenario() -> None:
        store = Store(Registry())
        everything = parse_label_selector(None)
        watch = Watcher(CONFIG_MAP, None, everything, lambda _obj: True)
        store.watchers.add(watch)
        for i in range(watch.queue.maxsize + 10):
            store.create(NAMESPACE, {"metadata": {"name": f"ns-{i}"}})
        assert not watch.overflowed and watch.queue.empty() and watch in store.watchers
        store.create(CONFIG_MAP, {"metadata": {"name": "one", "namespace": "ns-0"}})
        assert watch.queue.qsize() == 1

    asyncio.run(scenario())


def test_versions_from_another_run_of_the_sandbox_expire() -> None:
    async def scenario() -> None:
        earlier = Store(Registry())
        earlier.create(NAMESPACE, {"metadata": {"name": "before"}})
        held = earlier.rv
        time.sleep(0.01)
        later = Store(Registry())
        assert later.rv > held
        for rv in (held, later.rv + 1000):
            with pytest.raises(ApiError) as err:
                later.events_since(NAMESPACE, rv)
            assert err.value.code == 410
        assert later.events_since(NAMESPACE, later.rv) == []

    asyncio.run(scenario())


def test_a_fleet_file_describes_sites_and_their_clusters(tmp_path: Path) -> None:
    from sandbox.fleet import load_fleet

    path = tmp_path / "fleet.yaml"
    path.write_text(
        "sites:\n"
        "  - name: edge-1\n"
        "    region: us-east\n"
        "    zone: us-east-1a\n"
        "    provider: edge\n"
        "    syncMode: Pull\n"
        "    labels: {tier: edge}\n"
        "    taints: [{key: flaky, effect: NoSchedule}]\n"
        "    nodes: 3\n"
        "    capacity: {cpu: '2', memory: 4Gi, pods: '30', nvidia.com/gpu: '1'}\n"
    )
    (site,) = load_fleet(path)
    assert site.capacity == {"cpu": 2.0, "memory": 4 * 2**30, "pods": 30.0, "nvidia.com/gpu": 1.0}
    cluster = site.cluster_object()
    assert cluster["spec"]["syncMode"] == "Pull" and cluster["spec"]["region"] == "us-east"
    assert cluster["spec"]["taints"] == [{"key": "flaky", "effect": "NoSchedule"}]
    assert cluster["metadata"]["labels"]["tier"] == "edge"
    assert cluster["metadata"]["labels"]["topology.kubernetes.io/zone"] == "us-east-1a"


def test_the_demo_fleet_matches_the_design() -> None:
    from sandbox.fleet import load_fleet

    sites = {s.name: s for s in load_fleet()}
    assert set(sites) == {"site-a", "site-b", "site-c"}
    a, b, c = sites["site-a"], sites["site-b"], sites["site-c"]
    assert a.capacity["cpu"] - a.baseline["cpu"] < b.capacity["cpu"] - b.baseline["cpu"]
    assert c.capacity.get("nvidia.com/gpu", 0) > 0 and "nvidia.com/gpu" not in b.capacity
    assert c.labels["accelerator"].startswith("nvidia")


def test_clone_copies_deeply_and_falls_back_for_what_json_cannot_hold() -> None:
    from sandbox.store import clone

    original = {"a": [{"b": 1}], "c": {"d": "é", "e": 1.5, "f": None, "g": True}}
    copied = clone(original)
    assert copied == original
    copied["a"][0]["b"] = 2
    copied["c"]["d"] = "x"
    assert original == {"a": [{"b": 1}], "c": {"d": "é", "e": 1.5, "f": None, "g": True}}
    odd = {1: [2**70], "k": {"v": [1]}}  # a key that is not a string, an integer past 64 bits
    copied_odd = clone(odd)
    assert copied_odd == odd
    assert copied_odd["k"] is not odd["k"] and copied_odd[1] is not odd[1]


def test_a_fleet_file_gives_limit_range_defaults_and_bucket_quotas() -> None:
    site = Site.from_dict(
        {
            "name": "s",
            "limitRange": {"default": {"memory": "512Mi"}, "defaultRequest": {"memory": "1Mi"}},
            "artifacts": {"quota": "5Gi"},
        }
    )
    assert site.limit_range == {
        "default": {"memory": 512 * 2**20},
        "defaultRequest": {"memory": 2**20},
    }
    assert site.bucket_quota == 5 * 2**30
    # As the API server defaults a LimitRange: the default limit is the request too.
    assert parse_limit_range({"default": {"ephemeral-storage": "2Gi"}}, "x") == {
        "default": {"ephemeral-storage": 2 * 2**30},
        "defaultRequest": {"ephemeral-storage": 2 * 2**30},
    }
    assert Site.from_dict({"name": "t"}).bucket_quota == 10 * 2**30


@pytest.mark.parametrize(
    ("site", "message"),
    [
        ({"limitRange": {"max": {}}}, "site s: limitRange takes default and defaultRequest only"),
        ({"limitRange": {"default": {"cpu": "1"}}}, "takes memory and ephemeral-storage"),
        ({"limitRange": {"default": {"memory": "lots"}}}, "holds a value that is no size"),
        ({"artifacts": {"quota": "big"}}, "site s: artifacts.quota 'big' is not a size"),
        ({"artifacts": {"quota": "0"}}, "site s: artifacts.quota must be more than 0"),
    ],
)
def test_a_fleet_file_with_bad_limits_is_refused_naming_the_site(
    site: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Site.from_dict({"name": "s", **site})


def test_a_zone_field_selector_matches_the_clusters_zones_as_karmada_does() -> None:
    """pkg/util/selector.go: `zone` is matched against `spec.zones` (matchZones), provider and
    region against the spec's fields; the deprecated `spec.zone` is never read."""
    from sandbox.karmada.scheduling import affinity_matches

    two = Site.from_dict({"name": "x", "region": "eu", "zones": ["eu-1a", "eu-1b"]})
    cluster = two.cluster_object()
    assert cluster["spec"]["zones"] == ["eu-1a", "eu-1b"] and "zone" not in cluster["spec"]

    def zone(op: str, *values: str) -> dict[str, Any]:
        expr: dict[str, Any] = {"key": "zone", "operator": op}
        if values:
            expr["values"] = list(values)
        return {"fieldSelector": {"matchExpressions": [expr]}}

    assert affinity_matches(zone("In", "eu-1b"), cluster)
    assert not affinity_matches(zone("NotIn", "eu-1b"), cluster)
    assert affinity_matches(zone("Exists"), cluster)
    legacy = {"metadata": {"name": "y"}, "spec": {"region": "eu", "zone": "eu-1b"}}
    assert not affinity_matches(zone("In", "eu-1b"), legacy)  # no zones: In never matches
    assert affinity_matches(zone("DoesNotExist"), legacy)
    assert not affinity_matches(zone("Gt", "1"), cluster)  # not an operator for zones
    region = {
        "fieldSelector": {
            "matchExpressions": [{"key": "region", "operator": "In", "values": ["eu"]}]
        }
    }
    assert affinity_matches(region, cluster)
