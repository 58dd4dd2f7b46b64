"""deploy/ and docker-compose.yml: every manifest validates, the compose file is accepted.

* Karmada and Argo objects validate against the upstream CRDs in ../shared/reference, made
  strict the way the API server is: a field the structural schema does not know would be
  pruned (silently lost), so here it is an error unless the schema preserves unknown fields.
* Built-in Kubernetes objects have no schema here (no cluster, and kubectl's dry run needs
  one for discovery): every field name and type is checked against the models of the official
  ``kubernetes`` client, which are generated from the Kubernetes OpenAPI, and required fields
  by deserialising into those models. ``kubectl kustomize`` builds every kustomization.
* The Lua of the ResourceInterpreterCustomization runs under ``lua5.1`` (Karmada runs it
  with gopher-lua, a Lua 5.1), and what it returns validates against the CRDs too.
* ``docker-compose config`` (Debian's docker-compose) checks docker-compose.yml.

External tools (docker-compose, lua5.1, kubectl): ``.ci/run`` installs the first two. When one
is missing the test is skipped on a developer machine but *fails* under CI (``CI`` set), so a
broken install step cannot make CI pass without checking.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes.client as k8s_models
import pytest
import yaml
from django.core.management import call_command
from jsonschema import Draft7Validator

from placement.manifests import webhook_configuration

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference"
DEPLOY = REPO / "deploy"
COMPOSE = REPO / "docker-compose.yml"
COMPOSE_KARMADA = DEPLOY / "compose.karmada.yml"
INTERPRETER = DEPLOY / "karmada" / "workflow-interpreter.yaml"
EXAMPLE = DEPLOY / "examples" / "karmada-manifests.demo.yaml"
NOT_MANIFESTS = {"kustomization.yaml", "compose.karmada.yml"}
CRD_GROUPS = ("policy.karmada.io/", "work.karmada.io/", "config.karmada.io/", "argoproj.io/")
DOMAIN = "portal.multisite.io"
# libyaml when present: the Argo CRD is several megabytes.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def need_tool(name: str, install: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found ({install})"
    if os.environ.get("CI"):
        pytest.fail(message + ": CI must check this, see .ci/run")
    pytest.skip(message)


def need_reference() -> None:
    if not REFERENCE.is_dir():
        pytest.fail(f"upstream reference data not found at {REFERENCE}")


# --------------------------------------------------------------------------------------------
# Structural-schema validation of CRD objects


def strict(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as the API server applies it, for jsonschema:

    * objects with ``properties`` refuse other keys (the server would prune them), unless
      ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties`` says otherwise;
    * ``x-kubernetes-int-or-string`` accepts an integer or a string;
    * ``x-kubernetes-embedded-resource`` objects may carry apiVersion, kind and metadata;
    * ``nullable: true`` accepts null; the other ``x-kubernetes-*`` keys (list and map types)
      only guide server-side apply merges, not validation.
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items() if k != "description"}
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            props.setdefault(key, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@cache
def crd_validators() -> dict[tuple[str, str], Draft7Validator]:
    need_reference()
    files = sorted((REFERENCE / "karmada" / "crds").glob("*.yaml"))
    files.append(REFERENCE / "argo" / "argoproj.io_workflows.yaml")
    out: dict[tuple[str, str], Draft7Validator] = {}
    for path in files:
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            out[(f"{group}/{version['name']}", kind)] = Draft7Validator(schema)
    return out


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    return crd_validators()[(api_version, kind)].schema


def schema_problems(validator: Draft7Validator, obj: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message[:240]}"
        for e in validator.iter_errors(obj)
    ]


def crd_problems(obj: Mapping[str, Any]) -> list[str]:
    validator = crd_validators().get((obj["apiVersion"], obj["kind"]))
    if validator is None:
        return [f"no upstream CRD for {obj['apiVersion']} {obj['kind']}"]
    return schema_problems(validator, obj) + model_problems(
        obj.get("metadata", {}), "V1ObjectMeta", "metadata"
    )


# --------------------------------------------------------------------------------------------
# Built-in objects against the kubernetes client's generated models

_PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "datetime": (str,),
    "date": (str,),
}


def model_problems(value: Any, type_name: str, path: str) -> list[str]:
    """Unknown fields and wrong types, walking the model classes' ``openapi_types``."""
    if value is None:
        return []
    if type_name == "object":  # int-or-string, raw extensions: anything
        return []
    if type_name in _PRIMITIVES:
        ok = isinstance(value, _PRIMITIVES[type_name]) and not (
            type_name in ("int", "float") and isinstance(value, bool)
        )
        return [] if ok else [f"{path}: expected {type_name}, got {value!r}"]
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {value!r}"]
        return [p for i, v in enumerate(value) for p in model_problems(v, m[1], f"{path}[{i}]")]
    if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        if not isinstance(value, dict):
            return [f"{path}: expected a map, got {value!r}"]
        return [p for k, v in value.items() for p in model_problems(v, m[1], f"{path}.{k}")]
    model = getattr(k8s_models, type_name)
    if not isinstance(value, dict):
        return [f"{path}: expected a {type_name} object, got {value!r}"]
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    problems = []
    for key, item in value.items():
        if key not in by_json:
            problems.append(f"{path}.{key}: unknown field of {type_name}")
            continue
        problems += model_problems(item, model.openapi_types[by_json[key]], f"{path}.{key}")
    return problems


class _Response:
    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


def builtin_problems(obj: Mapping[str, Any]) -> list[str]:
    api_version, kind = obj["apiVersion"], obj["kind"]
    _group, _, version = api_version.rpartition("/")
    model_name = version.capitalize() + kind
    if not hasattr(k8s_models, model_name):
        return [f"no Kubernetes model for {api_version} {kind}"]
    problems = model_problems(dict(obj), model_name, kind)
    if problems:
        return problems
    try:  # required fields and enum-like checks the models do on construction
        k8s_models.ApiClient().deserialize(_Response(obj), model_name)
    except ValueError as exc:
        return [f"{kind}: {exc}"]
    return []


def manifest_problems(obj: Mapping[str, Any]) -> list[str]:
    if str(obj.get("apiVersion", "")).startswith(CRD_GROUPS):
        return crd_problems(obj)
    return builtin_problems(obj)


# --------------------------------------------------------------------------------------------
# The manifests in deploy/


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.y*ml") if p.name not in NOT_MANIFESTS and p.is_file())


def documents() -> Iterator[tuple[str, int, dict[str, Any]]]:
    for path in manifest_files():
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                yield str(path.relative_to(REPO)), i, doc


DOCUMENTS = list(documents())


def test_deploy_holds_the_manifests_the_issue_asks_for() -> None:
    kinds = {(path.split("/")[1], doc["kind"]) for path, _, doc in DOCUMENTS}
    for folder, kind in [
        ("host", "Deployment"),
        ("host", "Service"),
        ("host", "ConfigMap"),
        ("karmada", "Namespace"),
        ("karmada", "ClusterRole"),
        ("karmada", "Role"),
        ("karmada", "MutatingWebhookConfiguration"),
        ("karmada", "ResourceInterpreterCustomization"),
        ("member", "ConfigMap"),
        ("examples", "PropagationPolicy"),
    ]:
        assert (folder, kind) in kinds, f"deploy/{folder} has no {kind}"
    deployments = {
        doc["metadata"]["name"] for _, _, doc in DOCUMENTS if doc["kind"] == "Deployment"
    }
    assert deployments == {"portal-web", "portal-worker", "portal-beat", "portal-watcher"}


def test_two_watchers_and_two_beats_run_and_elect_a_leader(settings: Any) -> None:
    from portal import leader

    by_name = {d["metadata"]["name"]: d for _, _, d in DOCUMENTS if d["kind"] == "Deployment"}
    for name in ("portal-watcher", "portal-beat"):
        spec = by_name[name]["spec"]
        assert spec["replicas"] == 2, name
        # A rollout keeps one replica up: the election, not the strategy, keeps one leading.
        assert spec["strategy"]["type"] == "RollingUpdate", name
        assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 1, name
    assert by_name["portal-beat"]["spec"]["template"]["spec"]["containers"][0]["command"][:4] == [
        "celery",
        "-A",
        "portal",
        "beat",
    ]
    assert settings.CELERY_BEAT_SCHEDULER == "portal.beat:LeaderScheduler"
    # The Role names exactly the Leases the portal elects with.
    named = {n for g, r, n in grants(rules_of("Role")) if r == "leases" and n != "*"}
    assert named == {leader.WATCHER_LEASE, leader.BEAT_LEASE}


@pytest.mark.parametrize(
    ("path", "index", "doc"),
    DOCUMENTS,
    ids=[f"{p}#{i}:{d.get('kind')}" for p, i, d in DOCUMENTS],
)
def test_every_manifest_validates(path: str, index: int, doc: dict[str, Any]) -> None:
    assert manifest_problems(doc) == [], f"{path} document {index}"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (  # a field Karmada does not know would be pruned by the API server
            {
                "apiVersion": "policy.karmada.io/v1alpha1",
                "kind": "PropagationPolicy",
                "metadata": {"name": "x"},
                "spec": {
                    "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                    "placment": {},
                },
            },
            "spec: Additional properties are not allowed ('placment'",
        ),
        (  # wrong type deep inside a CRD
            {
                "apiVersion": "policy.karmada.io/v1alpha1",
                "kind": "PropagationPolicy",
                "metadata": {"name": "x"},
                "spec": {
                    "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                    "priority": "high",
                },
            },
            "spec/priority: 'high' is not of type 'integer'",
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "lables": {}}},
            "ConfigMap.metadata.lables: unknown field of V1ObjectMeta",
        ),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "x"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": "get"}],
            },
            "Role.rules[0].verbs: expected a list",
        ),
        (  # required field missing (Service port)
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "x"},
                "spec": {"ports": [{"name": "https"}]},
            },
            "`port`, must not be `None`",
        ),
        ({"apiVersion": "example.org/v1", "kind": "Gadget"}, "no Kubernetes model"),
    ],
)
def test_the_checks_catch_broken_manifests(obj: dict[str, Any], expected: str) -> None:
    problems = manifest_problems(obj)
    assert any(expected in p for p in problems), problems


def test_int_or_string_fields_take_both() -> None:
    schema = strict({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": True}}})
    validator = Draft7Validator(schema)
    assert not list(validator.iter_errors({"p": 80}))
    assert not list(validator.iter_errors({"p": "http"}))
    assert list(validator.iter_errors({"p": 1.5}))


def kustomizations() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))


@pytest.mark.parametrize("folder", kustomizations(), ids=lambda p: p.name)
def test_every_kustomization_builds_and_lists_its_folder(folder: Path) -> None:
    kubectl = need_tool("kubectl", "kubectl with kustomize, v1.32 on the project's machines")
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert built and all(manifest_problems(d) == [] for d in built)
    listed = set(yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"])
    # webhook.yaml is applied from `manage.py karmada_manifests` (URL, token and CA filled).
    present = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml", "webhook.yaml"}
    assert listed == present


# --------------------------------------------------------------------------------------------
# What the portal writes and expects on Karmada


def rules_of(kind: str, name: str = "multisite-portal", folder: str = "karmada") -> list[Any]:
    path = f"deploy/{folder}/rbac.yaml" if folder == "karmada" else "deploy/member/portal-rbac.yaml"
    docs = [
        d
        for p, _, d in DOCUMENTS
        if p == path and d["kind"] == kind and d["metadata"]["name"] == name
    ]
    assert len(docs) == 1
    return list(docs[0]["rules"])


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """(group, resource, resourceName or '*') -> verbs."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames", ["*"]):
                    out.setdefault((group, resource, name), set()).update(rule["verbs"])
    return out


def test_the_portal_identity_gets_exactly_what_the_gateway_calls() -> None:
    """No grant beyond what portal/karmada/ calls. That every call it makes is granted is
    checked where it counts: the integration tests run the portal as this ServiceAccount on
    a sandbox that evaluates this RBAC (and deploy/member's at the sites), and a stack test
    fails on any refusal of the portal's identity (tests/fixtures_stack.py)."""
    assert grants(rules_of("ClusterRole")) == {
        ("cluster.karmada.io", "clusters", "*"): {"get", "list", "watch"},
        ("", "namespaces", "portal"): {"get"},
        ("", "namespaces", "*"): {"create"},
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "portal-placement"): {
            "get",
            "update",
        },
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "*"): {"create"},
        # proxy.pod_log (GET) and member_workflow_get / member_workflow_replace (GET, PUT).
        ("cluster.karmada.io", "clusters/proxy", "*"): {"get", "update"},
    }
    # Only names the portal's groups for Karmada's unified auth: no request uses this verb.
    assert grants(rules_of("ClusterRole", "multisite-portal-proxy-groups")) == {
        ("cluster.karmada.io", "clusters/proxy", "*"): {"impersonate"},
    }
    crud = {"get", "list", "create", "update", "delete"}
    assert grants(rules_of("Role")) == {
        ("policy.karmada.io", "propagationpolicies", "*"): crud,
        ("policy.karmada.io", "overridepolicies", "*"): crud,
        ("argoproj.io", "workflows", "*"): {"get", "list", "watch", "create", "patch", "delete"},
        ("work.karmada.io", "resourcebindings", "*"): {"get", "list", "watch"},
        ("coordination.k8s.io", "leases", "*"): {"create"},
        ("coordination.k8s.io", "leases", "portal-watcher"): {"get", "update"},
        ("coordination.k8s.io", "leases", "portal-beat"): {"get", "update"},
        ("", "configmaps", "*"): {"get"},  # client.config_map_data (semaphore limits)
        ("", "secrets", "*"): {"get"},  # client.secret_data (signing pre-signed reads)
    }
    role = next(d for p, _, d in DOCUMENTS if p.endswith("rbac.yaml") and d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "portal"
    # At each site, as the impersonated portal: the log and the resume, nothing else.
    assert grants(rules_of("Role", folder="member")) == {
        ("", "pods/log", "*"): {"get"},
        ("argoproj.io", "workflows", "*"): {"get", "update"},
    }


def test_the_shipped_rbac_lets_the_portal_do_what_the_gateway_does() -> None:
    """The sandbox's evaluator (kube-apiserver's RBAC rules) over the shipped files, for
    each request the gateway's functions send, and Karmada's unified auth at a site."""
    from sandbox.authz.guard import load_rbac_files
    from sandbox.authz.rbac import Resolver, User
    from sandbox.authz.request import request_attributes

    karmada = Resolver(load_rbac_files([DEPLOY / "karmada" / "rbac.yaml"], "portal"))
    portal = User.service_account("portal", "portal")
    ns = "/apis/argoproj.io/v1alpha1/namespaces/portal"
    proxy = "/apis/cluster.karmada.io/v1alpha1/clusters/site-a/proxy"
    calls = [
        ("GET", "/apis/cluster.karmada.io/v1alpha1/clusters", {"watch": "true"}),
        ("GET", "/api/v1/namespaces/portal", {}),
        ("GET", "/api/v1/namespaces/portal/configmaps/limits", {}),
        ("GET", "/api/v1/namespaces/portal/secrets/site-a-artifacts-credentials", {}),
        ("POST", f"{ns}/workflows", {}),
        ("PATCH", f"{ns}/workflows/w", {}),
        ("DELETE", f"{ns}/workflows/w", {}),
        ("GET", "/apis/work.karmada.io/v1alpha2/namespaces/portal/resourcebindings", {}),
        ("PUT", "/apis/policy.karmada.io/v1alpha1/namespaces/portal/propagationpolicies/p", {}),
        (
            "PUT",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/portal-placement",
            {},
        ),
        ("GET", f"{proxy}/api/v1/namespaces/portal/pods/p/log", {}),
        ("PUT", f"{proxy}/apis/argoproj.io/v1alpha1/namespaces/portal/workflows/w", {}),
    ]
    refused = [c[:2] for c in calls if not karmada.allows(request_attributes(portal, *c))]
    assert refused == []
    # Anything else in the namespace, or another namespace, stays refused.
    assert not karmada.allows(
        request_attributes(portal, "GET", "/api/v1/namespaces/portal/secrets", {})
    )
    assert not karmada.allows(
        request_attributes(
            portal, "POST", "/apis/argoproj.io/v1alpha1/namespaces/default/workflows", {}
        )
    )


def test_the_gateway_uses_no_resource_the_rbac_does_not_grant() -> None:
    from portal.karmada import proxy, resources

    granted = {(g, r) for g, r, _ in grants(rules_of("ClusterRole")) | grants(rules_of("Role"))}
    used = {
        resources.CLUSTER,
        resources.PROPAGATION_POLICY,
        resources.OVERRIDE_POLICY,
        resources.RESOURCE_BINDING,
        resources.WORKFLOW,
        resources.LEASE,
    }
    assert {(r.group, r.plural) for r in used} <= granted
    assert ("cluster.karmada.io", "clusters/proxy") in granted
    assert "clusters/{site}/proxy" in proxy.CLUSTER_PROXY_LOG
    # ClusterPropagationPolicy is declared in portal.karmada.resources but nothing calls it;
    # granting it would let the portal place objects of any namespace.
    assert ("policy.karmada.io", "clusterpropagationpolicies") not in granted


def test_the_webhook_reference_is_what_the_portal_registers() -> None:
    shipped = yaml.safe_load((DEPLOY / "karmada" / "webhook.yaml").read_text())
    url = shipped["webhooks"][0]["clientConfig"]["url"]
    ca = shipped["webhooks"][0]["clientConfig"]["caBundle"]
    assert url.startswith("https://") and "REPLACE-WITH-PORTAL_WEBHOOK_TOKEN" in url
    expected = webhook_configuration(url, ca_bundle=ca, domain=DOMAIN)
    assert shipped == expected
    for hook in shipped["webhooks"]:
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] == 3
        assert "url" in hook["clientConfig"] and "service" not in hook["clientConfig"]
        assert hook["objectSelector"]


@pytest.mark.django_db
def test_the_example_is_what_karmada_manifests_prints_for_the_demo_fleet(settings) -> None:
    settings.PORTAL_WEBHOOK_URL = "https://portal-web.portal-system.svc:443/webhooks/placement/"
    settings.PORTAL_WEBHOOK_TOKEN = "EXAMPLE-TOKEN"
    settings.PORTAL_WEBHOOK_CA_BUNDLE = ""
    settings.KARMADA_NAMESPACE = "portal"
    settings.PORTAL_LABEL_DOMAIN = DOMAIN
    settings.PORTAL_POLICY_PREFIX = "portal-site-"
    call_command("load_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from io import StringIO

    out = StringIO()
    call_command("karmada_manifests", "--namespace-object", stdout=out)
    printed = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert printed == [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d], (
        "the demo fleet or the manifests changed: regenerate the example (see its header)"
    )
    kinds = [d["kind"] for d in printed]
    assert kinds.count("PropagationPolicy") == 7  # three sites, the fallback, a Secret per site
    for doc in printed:
        assert manifest_problems(doc) == [], doc["metadata"]["name"]


@pytest.mark.django_db
def test_karmada_manifests_with_site_overrides_validate(settings) -> None:
    call_command("load_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from io import StringIO

    from sites.models import Site

    Site.objects.filter(name="site-c").update(
        overrides={
            "artifact_repository": {"configMap": "artifact-repositories", "key": "site-s3"},
            "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
        }
    )
    out = StringIO()
    call_command("karmada_manifests", stdout=out)
    printed = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert [d["kind"] for d in printed].count("OverridePolicy") == 2
    for doc in printed:
        assert manifest_problems(doc) == [], doc["metadata"]["name"]


# --------------------------------------------------------------------------------------------
# The Workflow interpreter's Lua, run with lua5.1

# A JSON encoder for the harness (gopher-lua hands Karmada Go values; here plain tables).
_LUA_JSON = r"""
local function encode(v)
  local t = type(v)
  if t == 'nil' then return 'null' end
  if t == 'boolean' then return tostring(v) end
  if t == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e15 then return string.format('%d', v) end
    return string.format('%.17g', v)
  end
  if t == 'string' then
    return '"' .. v:gsub('[%c"\\]', function(c)
      return string.format('\\u%04x', string.byte(c))
    end) .. '"'
  end
  if #v > 0 or next(v) == nil and getmetatable(v) == 'array' then
    local parts = {}
    for i = 1, #v do parts[i] = encode(v[i]) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  local keys = {}
  for k in pairs(v) do table.insert(keys, tostring(k)) end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do table.insert(parts, encode(k) .. ':' .. encode(v[k])) end
  return '{' .. table.concat(parts, ',') .. '}'
end
"""


def lua_literal(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # Decimal escapes of the UTF-8 bytes, three digits each: a digit after one is safe.
        escaped = "".join(chr(b) if chr(b).isalnum() else f"\\{b:03d}" for b in value.encode())
        return "'" + escaped + "'"
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(value)


def customization(name: str) -> str:
    ric = yaml.safe_load(INTERPRETER.read_text())
    return str(ric["spec"]["customizations"][name]["luaScript"])


def run_lua(name: str, call: str, *args: Any) -> Any:
    """Define the customization's function, call it with ``args``, return its results."""
    lua = need_tool("lua5.1", "apt-get install lua5.1")
    arg_list = ", ".join(lua_literal(a) for a in args)
    program = "\n".join(
        [
            _LUA_JSON,
            customization(name),
            f"local results = {{{call}({arg_list})}}",
            "local out = {}",
            "for i = 1, select('#', unpack(results)) do out[i] = encode(results[i]) end",
            "io.write('[' .. table.concat(out, ',') .. ']')",
        ]
    )
    out = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def member_status(phase: str, **extra: Any) -> dict[str, Any]:
    status = {
        "phase": phase,
        "startedAt": "2026-12-02T10:00:00Z",
        "progress": "1/2",
        "estimatedDuration": 30,
        "resourcesDuration": {"cpu": 12, "memory": 40},
        "nodes": {"n1": {"id": "n1", "name": "n1", "type": "Pod", "phase": phase}},
    }
    status.update(extra)
    return status


def control_plane_workflow() -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "eo-x7k2p-preprocess-1", "namespace": "portal"},
        "spec": {
            "entrypoint": "preprocess",
            "templates": [{"name": "preprocess", "container": {"image": "busybox"}}],
        },
    }


def test_the_interpreter_asks_karmada_for_no_status_write_argos_crd_cannot_take() -> None:
    """Karmada writes an aggregated status with UpdateStatus, the /status subresource
    (pkg/controllers/status/common.go); Argo's Workflow CRD declares none, so a
    statusAggregation would answer 404 on every step's every status change."""
    need_reference()
    crd = yaml.load((REFERENCE / "argo" / "argoproj.io_workflows.yaml").read_text(), _LOADER)
    assert all(not v.get("subresources") for v in crd["spec"]["versions"])
    ric = yaml.safe_load(INTERPRETER.read_text())
    assert "statusAggregation" not in ric["spec"]["customizations"]
    # What Karmada stores on the binding (statusReflection) is the portal's source instead.
    assert "statusReflection" in ric["spec"]["customizations"]


def test_the_interpreter_never_claims_karmada_places_by_capacity() -> None:
    """Duplicated replica scheduling (the portal's policies, Karmada's default) ignores
    available resources (pkg/scheduler/core/spreadconstraint/select_clusters.go)."""
    header = INTERPRETER.read_text().split("apiVersion:", 1)[0]
    assert "does NOT make Karmada place a" in header
    assert "resource-aware scheduling" not in header


def test_the_shipped_interpreter_on_the_sandbox_causes_no_failed_status_writes(
    sandbox: Any,
) -> None:
    """Applied to the sandbox (which, as Karmada, tries UpdateStatus when a Workflow
    interpreter defines statusAggregation and records AggregateStatusFailed), a step runs to
    its end with no such Event."""
    from kubernetes import client

    api = sandbox.api_client()
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    custom.create_cluster_custom_object(
        "config.karmada.io",
        "v1alpha1",
        "resourceinterpretercustomizations",
        yaml.safe_load(INTERPRETER.read_text()),
    )
    name = f"ric-{os.getpid()}"
    policy = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": name}
            ],
            "placement": {"clusterAffinity": {"clusterNames": ["site-b"]}},
        },
    }
    custom.create_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", "default", "propagationpolicies", policy
    )
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "entrypoint": "main",
            "templates": [{"name": "main", "container": {"image": "busybox"}}],
        },
    }
    custom.create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", "default", "workflows", workflow
    )

    def phase() -> str:
        try:
            binding = custom.get_namespaced_custom_object(
                "work.karmada.io", "v1alpha2", "default", "resourcebindings", f"{name}-workflow"
            )
        except client.ApiException as exc:
            if exc.status == 404:  # not bound yet
                return ""
            raise
        items = (binding.get("status") or {}).get("aggregatedStatus") or [{}]
        return str((items[0].get("status") or {}).get("phase") or "")

    sandbox.wait_for(lambda: phase() == "Succeeded", what="the step to succeed")
    events = core.list_namespaced_event("default").items
    assert [e.reason for e in events if e.involved_object.name == name] == []


def test_reflection_keeps_the_whole_member_status_the_portal_reads() -> None:
    status = member_status(
        "Succeeded", outputs={"parameters": [{"name": "tile-count", "value": "4"}]}
    )
    observed = {**control_plane_workflow(), "status": status}
    (reflected,) = run_lua("statusReflection", "ReflectStatus", observed)
    assert reflected == status


@pytest.mark.parametrize(
    ("status", "healthy"),
    [
        (None, True),
        ({}, True),
        ({"phase": "Pending"}, True),
        ({"phase": "Running"}, True),
        ({"phase": "Succeeded"}, True),
        ({"phase": "Failed"}, False),
        ({"phase": "Error"}, False),
    ],
)
def test_health_is_bad_only_for_failed_and_error(status: Any, healthy: bool) -> None:
    observed = control_plane_workflow()
    if status is not None:
        observed["status"] = status
    assert run_lua("healthInterpretation", "InterpretHealth", observed) == [healthy]


def gpu_step_workflow() -> dict[str, Any]:
    wf = control_plane_workflow()
    wf["spec"] = {
        "entrypoint": "inference",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "templates": [
            {
                "name": "inference",
                "container": {
                    "image": "ghcr.io/eo/inference:0.9.2",
                    "resources": {
                        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
                    },
                },
            },
            {
                "name": "summary",
                "script": {
                    "image": "python:3.12",
                    "source": "print(1)",
                    "resources": {"requests": {"cpu": "500m", "memory": "32Gi"}},
                },
            },
            {
                "name": "pair",
                "containerSet": {
                    "containers": [
                        {"name": "a", "image": "x", "resources": {"requests": {"cpu": "3"}}},
                        {"name": "b", "image": "y", "resources": {"requests": {"cpu": "2500m"}}},
                    ]
                },
            },
        ],
    }
    return wf


def test_replica_requirements_carry_the_largest_pod_request_and_the_gpus() -> None:
    wf = gpu_step_workflow()
    assert crd_problems(wf) == []  # a Workflow Argo accepts
    replicas, requirement = run_lua("replicaResource", "GetReplicas", wf)
    assert replicas == 1
    assert requirement["resourceRequest"] == {
        "cpu": "5.5",  # the containerSet pod: 3 + 2.5 CPUs
        "memory": "32Gi",  # the script pod
        "nvidia.com/gpu": "1",
    }
    assert requirement["nodeClaim"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert requirement["nodeClaim"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    # What Karmada stores in the binding must fit the binding's schema.
    spec = crd_schema("work.karmada.io/v1alpha2", "ResourceBinding")["properties"]["spec"]
    assert (
        schema_problems(Draft7Validator(spec["properties"]["replicaRequirements"]), requirement)
        == []
    )


def test_replicas_follow_parallelism_and_a_workflow_without_requests_has_none() -> None:
    wf = control_plane_workflow()
    wf["spec"]["parallelism"] = 3
    replicas, requirement = run_lua("replicaResource", "GetReplicas", wf)
    assert replicas == 3
    assert "resourceRequest" not in requirement


def test_components_match_the_replica_resource() -> None:
    wf = gpu_step_workflow()
    (components,) = run_lua("componentResource", "GetComponents", wf)
    _, requirement = run_lua("replicaResource", "GetReplicas", wf)
    assert components == [{"name": "workflow", "replicas": 1, "replicaRequirements": requirement}]
    spec = crd_schema("work.karmada.io/v1alpha2", "ResourceBinding")["properties"]["spec"]
    assert schema_problems(Draft7Validator(spec["properties"]["components"]), components) == []


def test_retention_keeps_what_argo_wrote_in_the_member() -> None:
    desired = control_plane_workflow()
    observed = {**control_plane_workflow(), "status": member_status("Running")}
    observed["spec"] = {**observed["spec"], "suspend": True}
    (retained,) = run_lua("retention", "Retain", desired, observed)
    assert retained["status"] == observed["status"]
    assert retained["spec"]["suspend"] is True


# --------------------------------------------------------------------------------------------
# docker-compose.yml


# docker-compose.yml has no secret defaults: it refuses to start without these.
COMPOSE_SECRETS = {
    "SECRET_KEY": "compose-test-secret-key-3f9a1c7e5b2d4a6c8e0f1a3b5c7d9e1f",
    "PORTAL_WEBHOOK_TOKEN": "compose-test-webhook-token-8b6d4f2a0c9e7a5b",
    "POSTGRES_PASSWORD": "compose-test-db-password-1d3f5b7a9c",
}


def compose(
    *files: Path, env: Mapping[str, str] | None = None, secrets: bool = True
) -> subprocess.CompletedProcess[str]:
    tool = need_tool("docker-compose", "apt-get install docker-compose")
    args = [tool, "--project-directory", str(REPO)]
    for f in files:
        args += ["-f", str(f)]
    # Only PATH: a developer's SECRET_KEY or KARMADA_KUBECONFIG must not change the result.
    clean = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **(COMPOSE_SECRETS if secrets else {}),
        **(env or {}),
    }
    return subprocess.run(
        [*args, "config"], capture_output=True, text=True, check=False, env=clean, cwd=REPO
    )


def test_docker_compose_config_accepts_the_compose_file() -> None:
    out = compose(COMPOSE)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    assert set(services) == {"postgres", "redis", "web", "worker", "beat", "watcher", "sandbox"}
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
    assert "gunicorn" in " ".join(services["web"]["command"])
    assert "runserver" not in " ".join(services["web"]["command"])
    assert services["watcher"]["command"] == ["python", "manage.py", "watch_karmada"]
    # The sandbox writes a kubeconfig the others can dial, where they read it.
    sandbox = services["sandbox"]["command"]
    assert sandbox[sandbox.index("--host") + 1] == "0.0.0.0"
    assert sandbox[sandbox.index("--server-url") + 1] == "http://sandbox:18443"
    kubeconfig = sandbox[sandbox.index("--kubeconfig") + 1]
    for name in ("web", "worker", "beat", "watcher"):
        assert services[name]["environment"]["KARMADA_KUBECONFIG"] == kubeconfig
        mounts = {v.split(":")[1] for v in services[name]["volumes"]}
        assert str(Path(kubeconfig).parent) in mounts
    assert {"pgdata", "portal-var"} <= set(config["volumes"])


def test_the_karmada_override_drops_the_sandbox_and_mounts_the_kubeconfig() -> None:
    out = compose(COMPOSE, COMPOSE_KARMADA, env={"KARMADA_KUBECONFIG_FILE": "/srv/karmada.config"})
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    assert services["sandbox"]["profiles"] == ["sandbox"]
    for name in ("web", "worker", "beat", "watcher"):
        path = services[name]["environment"]["KARMADA_KUBECONFIG"]
        assert f"/srv/karmada.config:{path}:ro" in services[name]["volumes"]
    missing = compose(COMPOSE, COMPOSE_KARMADA)
    assert missing.returncode != 0 and "KARMADA_KUBECONFIG_FILE" in missing.stderr


@pytest.mark.parametrize("missing", sorted(COMPOSE_SECRETS))
def test_docker_compose_refuses_to_start_without_each_secret(missing: str) -> None:
    others = {k: v for k, v in COMPOSE_SECRETS.items() if k != missing}
    out = compose(COMPOSE, env=others, secrets=False)
    assert out.returncode != 0
    assert f"set {missing}" in out.stderr  # the message says what to set
    empty = compose(COMPOSE, env={**others, missing: ""}, secrets=False)
    assert empty.returncode != 0 and f"set {missing}" in empty.stderr


def test_docker_compose_holds_no_secret_and_publishes_the_web_port_on_loopback() -> None:
    text = COMPOSE.read_text()
    for old_default in ("change-me-in-production", "compose-webhook-token-change-me"):
        assert old_default not in text
    out = compose(COMPOSE)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    env = services["web"]["environment"]
    assert env["SECRET_KEY"] == COMPOSE_SECRETS["SECRET_KEY"]
    assert env["PORTAL_WEBHOOK_TOKEN"] == COMPOSE_SECRETS["PORTAL_WEBHOOK_TOKEN"]
    password = COMPOSE_SECRETS["POSTGRES_PASSWORD"]
    assert f":{password}@postgres:" in env["DATABASE_URL"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == password
    for name, service in services.items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else f"{port.get('host_ip', '')}:"
            assert published.startswith("127.0.0.1:"), (name, port)
    wide = compose(COMPOSE, env={"PORTAL_BIND_ADDRESS": "0.0.0.0", "PORTAL_PORT": "9000"})
    assert wide.returncode == 0, wide.stderr
    assert yaml.safe_load(wide.stdout)["services"]["web"]["ports"] == ["0.0.0.0:9000:8000/tcp"]
    # gunicorn with the configuration that keeps the webhook token out of the access log
    assert "python:portal.gunicorn_conf" in " ".join(services["web"]["command"])


def test_docker_compose_config_refuses_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        COMPOSE.read_text().replace("  worker:\n", "  worker:\n    restart_policy: x\n", 1)
    )
    out = compose(broken)
    assert out.returncode != 0
    assert "restart_policy" in out.stderr


# --------------------------------------------------------------------------------------------
# The sandbox's --server-url (for the compose file)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_sandbox_writes_the_server_url_it_is_given(tmp_path: Path) -> None:
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "--port",
            str(port),
            "--kubeconfig",
            str(kubeconfig),
            "--server-url",
            "http://sandbox:18443/",
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # The line comes after the kubeconfig is written; EOF (a crash) ends the wait too.
        line = proc.stdout.readline()
        assert f"serving at http://127.0.0.1:{port}" in line
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == "http://sandbox:18443"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/version") as resp:
            assert resp.status == 200  # still listening where it was told to
    finally:
        proc.terminate()
        proc.wait()


def test_web_probes_send_a_host_django_allows() -> None:
    config = next(d for p, _, d in DOCUMENTS if p == "deploy/host/configmap.yaml")
    allowed = config["data"]["ALLOWED_HOSTS"].split(",")
    web = next(d for _, _, d in DOCUMENTS if d["metadata"]["name"] == "portal-web")
    container = web["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        # Without it the kubelet sends the pod IP, and Django answers 400 DisallowedHost.
        headers = {h["name"]: h["value"] for h in container[probe]["httpGet"]["httpHeaders"]}
        assert headers["Host"] in allowed
    assert "--certfile=/etc/portal/tls/tls.crt" in container["command"]
    assert allowed[0] != "*"


# --------------------------------------------------------------------------------------------
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
