"""Compile plans to Karmada and Argo objects (DESIGN section 3), and run-time helpers.

Pure module: plain dicts in, plain dicts out; nothing here talks to a cluster.

* ``propagation_policy(site)``, ``fallback_policy()``, ``override_policies(site, overrides)``,
  ``webhook_configuration(url)`` and ``karmada_manifests(...)``: the objects the portal keeps on
  karmada-apiserver.
* ``step_workflow(parsed, unit, ...)``: the Argo Workflow that runs one placement unit.
* ``substitute`` / ``resolve_arguments``: fill ``{{workflow.parameters.x}}``,
  ``{{tasks.X.outputs...}}``, ``{{steps.X.outputs...}}`` and ``{{item}}`` from known values.
* ``evaluate_depends`` / ``evaluate_when``: decide whether a unit runs, given upstream phases.

Site ``overrides`` (operator-set, ``sites.Site.overrides``)::

    {
      "artifact_repository": {"configMap": "artifact-repositories", "key": "site-a-s3"},
      "gpu_node_selector": {"nvidia.com/gpu.present": "true"},
      "image_registry_mirror": "mirror.site-a.example.org"
    }
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.parser import (
    DEFAULT_DOMAIN,
    Arguments,
    Artifact,
    DependsExpr,
    ParsedWorkflow,
    Unit,
    parse_depends,
)

API_VERSION = "argoproj.io/v1alpha1"
POLICY_API = "policy.karmada.io/v1alpha1"
DEFAULT_POLICY_PREFIX = "portal-site-"
FALLBACK_POLICY = "portal-fallback"
WEBHOOK_NAME = "portal-placement"
SITE_POLICY_PRIORITY = 100
FALLBACK_POLICY_PRIORITY = 10  # lower: only takes what no site policy claimed
NAME_MAX = 63
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Workflow-level fields a step workflow must not inherit: the portal sets or runs them itself.
_NOT_INHERITED = frozenset(
    {
        "templates",
        "entrypoint",
        "arguments",
        "onExit",
        "hooks",
        "workflowTemplateRef",
        "suspend",
        "shutdown",
    }
)


def labels_for(domain: str) -> dict[str, str]:
    """The label keys of the contract, for a label domain."""
    return {
        k: f"{domain}/{k}"
        for k in ("managed", "run", "unit", "attempt", "site", "placement", "reason", "gpu")
    }


def dns_name(*parts: str, max_len: int = NAME_MAX) -> str:
    """Join parts into a DNS-1123 name of at most ``max_len`` characters; when the readable
    form is too long, cut it and add a hash of the full form, so distinct inputs stay distinct."""
    full = "-".join(p for p in parts if p)
    clean = re.sub(r"[^a-z0-9-]+", "-", full.lower()).strip("-") or "x"
    clean = re.sub(r"-{2,}", "-", clean)
    if clean == full and len(clean) <= max_len:
        return clean
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    head = clean[: max_len - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def label_value(value: str) -> str:
    """A valid Kubernetes label value for ``value`` (hash-shortened if needed)."""
    if len(value) <= NAME_MAX and LABEL_VALUE.match(value):
        return value
    return dns_name(value)


# --------------------------------------------------------------------------------------------
# Karmada policies


def _workflow_selector(
    match_labels: Mapping[str, str], expressions: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    selector: dict[str, Any] = {"matchLabels": dict(match_labels)}
    if expressions:
        selector["matchExpressions"] = [dict(e) for e in expressions]
    return {"apiVersion": API_VERSION, "kind": "Workflow", "labelSelector": selector}


def propagation_policy(
    site: str,
    *,
    namespace: str,
    domain: str = DEFAULT_DOMAIN,
    prefix: str = DEFAULT_POLICY_PREFIX,
) -> dict[str, Any]:
    """``portal-site-<site>``: Workflows labelled ``P/site=<site>`` go to that one cluster."""
    keys = labels_for(domain)
    return {
        "apiVersion": POLICY_API,
        "kind": "PropagationPolicy",
        "metadata": {
            "name": dns_name(prefix + site),
            "namespace": namespace,
            "labels": {keys["managed"]: "true", keys["site"]: label_value(site)},
        },
        "spec": {
            "resourceSelectors": [_workflow_selector({keys["site"]: label_value(site)})],
            "priority": SITE_POLICY_PRIORITY,
            "placement": {"clusterAffinity": {"clusterNames": [site]}},
        },
    }


def fallback_policy(*, namespace: str, domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """Managed Workflows without a site label (the webhook was unreachable): Karmada picks
    exactly one ready cluster (spread over clusters, one group)."""
    keys = labels_for(domain)
    return {
        "apiVersion": POLICY_API,
        "kind": "PropagationPolicy",
        "metadata": {
            "name": FALLBACK_POLICY,
            "namespace": namespace,
            "labels": {keys["managed"]: "true"},
        },
        "spec": {
            "resourceSelectors": [
                _workflow_selector(
                    {keys["managed"]: "true"},
                    [{"key": keys["site"], "operator": "DoesNotExist"}],
                )
            ],
            "priority": FALLBACK_POLICY_PRIORITY,
            "placement": {
                "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}]
            },
        },
    }


def override_policies(
    site: str,
    overrides: Mapping[str, Any],
    *,
    namespace: str,
    domain: str = DEFAULT_DOMAIN,
    prefix: str = DEFAULT_POLICY_PREFIX,
) -> list[dict[str, Any]]:
    """The site's OverridePolicy objects (empty when the site has no overrides).

    * ``artifact_repository`` (``{"configMap", "key"}``): every step workflow at the site uses
      that artifact repository (``spec.artifactRepositoryRef``).
    * ``gpu_node_selector``: a *second* policy, ``<prefix><site>-gpu``, selecting only step
      workflows labelled ``P/gpu=true``; Karmada's resource selectors are per policy, and CPU
      steps must not be pinned to GPU nodes.
    * ``image_registry_mirror`` is *not* an OverridePolicy: Karmada's imageOverrider finds
      images by itself only in Pods and built-in workloads, and needs an exact path for a
      Workflow's templates. ``mirror_images()`` rewrites the step workflow instead (when it is
      compiled for a known site, and by the webhook for runtime units).
    """
    keys = labels_for(domain)
    meta_labels = {keys["managed"]: "true", keys["site"]: label_value(site)}
    out: list[dict[str, Any]] = []
    repo = overrides.get("artifact_repository")
    if isinstance(repo, Mapping) and repo:
        out.append(
            {
                "apiVersion": POLICY_API,
                "kind": "OverridePolicy",
                "metadata": {
                    "name": dns_name(prefix + site),
                    "namespace": namespace,
                    "labels": meta_labels,
                },
                "spec": {
                    "resourceSelectors": [_workflow_selector({keys["site"]: label_value(site)})],
                    "overrideRules": [
                        {
                            "targetCluster": {"clusterNames": [site]},
                            "overriders": {
                                "plaintext": [
                                    {
                                        "path": "/spec/artifactRepositoryRef",
                                        "operator": "add",
                                        "value": dict(repo),
                                    }
                                ]
                            },
                        }
                    ],
                },
            }
        )
    gpu = overrides.get("gpu_node_selector")
    if isinstance(gpu, Mapping) and gpu:
        out.append(
            {
                "apiVersion": POLICY_API,
                "kind": "OverridePolicy",
                "metadata": {
                    "name": dns_name(prefix + site + "-gpu"),
                    "namespace": namespace,
                    "labels": meta_labels,
                },
                "spec": {
                    "resourceSelectors": [
                        _workflow_selector({keys["site"]: label_value(site), keys["gpu"]: "true"})
                    ],
                    "overrideRules": [
                        {
                            "targetCluster": {"clusterNames": [site]},
                            "overriders": {
                                "plaintext": [
                                    {
                                        "path": "/spec/nodeSelector",
                                        "operator": "add",
                                        "value": {str(k): str(v) for k, v in gpu.items()},
                                    }
                                ]
                            },
                        }
                    ],
                },
            }
        )
    return out


def webhook_configuration(
    url: str,
    *,
    ca_bundle: str | None = None,
    domain: str = DEFAULT_DOMAIN,
    name: str = WEBHOOK_NAME,
    timeout_seconds: int = 3,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration for karmada-apiserver: ``clientConfig.url`` (a
    ``service:`` reference would be looked up inside karmada-apiserver), never failing CREATE."""
    keys = labels_for(domain)
    client: dict[str, Any] = {"url": url}
    if ca_bundle:
        client["caBundle"] = ca_bundle
    common: dict[str, Any] = {
        "clientConfig": client,
        "rules": [
            {
                "apiGroups": ["argoproj.io"],
                "apiVersions": ["v1alpha1"],
                "operations": ["CREATE"],
                "resources": ["workflows"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        # It records decisions, and records nothing on a dry run.
        "sideEffects": "NoneOnDryRun",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
        "reinvocationPolicy": "Never",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {keys["managed"]: "true"}},
        "webhooks": [
            {
                "name": f"runtime.placement.{domain}",
                **copy.deepcopy(common),
                "objectSelector": {"matchLabels": {keys["placement"]: "runtime"}},
            },
            {
                "name": f"unmanaged.placement.{domain}",
                **copy.deepcopy(common),
                "objectSelector": {
                    "matchExpressions": [{"key": keys["managed"], "operator": "DoesNotExist"}]
                },
            },
        ],
    }


def karmada_manifests(
    sites: Iterable[str | tuple[str, Mapping[str, Any]]],
    *,
    namespace: str,
    webhook_url: str,
    ca_bundle: str | None = None,
    domain: str = DEFAULT_DOMAIN,
    prefix: str = DEFAULT_POLICY_PREFIX,
) -> list[dict[str, Any]]:
    """Everything the portal expects on karmada-apiserver, in a stable order: per-site
    propagation and override policies (sites by name), the fallback policy, the webhook.
    ``sites`` are names or ``(name, overrides)`` pairs."""
    pairs = sorted(
        ((s, {}) if isinstance(s, str) else (s[0], s[1]) for s in sites), key=lambda p: p[0]
    )
    out: list[dict[str, Any]] = []
    for site, overrides in pairs:
        out.append(propagation_policy(site, namespace=namespace, domain=domain, prefix=prefix))
        out += override_policies(site, overrides, namespace=namespace, domain=domain, prefix=prefix)
    out.append(fallback_policy(namespace=namespace, domain=domain))
    out.append(webhook_configuration(webhook_url, ca_bundle=ca_bundle, domain=domain))
    return out


# --------------------------------------------------------------------------------------------
# Template substitution


@dataclass(frozen=True)
class TaskOutputs:
    """What a finished upstream unit produced, as the portal read it back from Argo's status.
    ``artifacts`` are Argo artifact objects (``{"name", "s3": {...}}`` ...) keyed by name."""

    phase: str = "Succeeded"
    parameters: Mapping[str, str] = field(default_factory=dict)
    result: str | None = None
    artifacts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    exit_code: str | None = None
    # Other node facts Argo exposes as {{tasks.X.<field>}}: ip, id, startedAt, finishedAt, ...
    extra: Mapping[str, str] = field(default_factory=dict)


class Unresolved(ValueError):
    """Some ``{{...}}`` references could not be filled (an upstream output missing)."""

    def __init__(self, references: Sequence[str]) -> None:
        self.references = list(references)
        super().__init__("unresolved: " + ", ".join(self.references))


_REF = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
# What the portal fills; everything else ({{inputs...}}, {{pod.name}}, {{=expr}}) is Argo's.
_PORTAL_REFS = ("workflow.parameters.", "tasks.", "steps.")


def aggregate_outputs(expanded: Sequence[TaskOutputs]) -> TaskOutputs:
    """Outputs of an expanded task (withItems/withParam) as Argo shows them downstream:
    each output parameter becomes a JSON list of the items' values."""
    names = sorted({n for o in expanded for n in o.parameters})
    phases = [o.phase for o in expanded]
    phase = "Succeeded" if all(p in ("Succeeded", "Skipped") for p in phases) else "Failed"
    return TaskOutputs(
        phase=phase,
        parameters={n: json.dumps([o.parameters.get(n) for o in expanded]) for n in names},
        result=json.dumps([o.result for o in expanded]),
    )


def _lookup(
    ref: str,
    workflow_parameters: Mapping[str, str],
    outputs: Mapping[str, TaskOutputs],
    item: Any,
    has_item: bool,
    current: str | None = None,
) -> tuple[bool, Any]:
    """(found, value) for one reference; found False means "not ours" or "missing"."""
    if ref.startswith("workflow.parameters."):
        name = ref[len("workflow.parameters.") :]
        if name in workflow_parameters:
            return True, workflow_parameters[name]
        return False, None
    if ref == "item" or ref.startswith("item."):
        if not has_item:
            return False, None
        v: Any = item
        for part in ref.split(".")[1:]:
            if isinstance(v, Mapping) and part in v:
                v = v[part]
            else:
                return False, None
        return True, v
    head, _, rest = ref.partition(".")
    if head not in ("tasks", "steps"):
        return False, None
    if rest == "name" and current is not None:
        return True, current
    task, _, what = rest.partition(".")
    out = outputs.get(task)
    if out is None:
        return False, None
    if what == "outputs.result":
        return out.result is not None, out.result
    if what.startswith("outputs.parameters."):
        name = what[len("outputs.parameters.") :]
        return name in out.parameters, out.parameters.get(name)
    if what.startswith("outputs.artifacts."):
        name = what[len("outputs.artifacts.") :]
        return name in out.artifacts, out.artifacts.get(name)
    if what == "status":
        return True, out.phase
    if what == "exitCode":
        return out.exit_code is not None, out.exit_code
    if what == "outputs.parameters":
        return True, json.dumps(dict(out.parameters), sort_keys=True)
    return what in out.extra, out.extra.get(what)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, sort_keys=True)


def substitute(
    text: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
    missing: list[str] | None = None,
    current: str | None = None,
) -> str:
    """Fill the portal's references in ``text``; ``{{inputs...}}`` and other references Argo
    fills inside the step workflow stay as they are. References to workflow parameters, upstream
    tasks/steps or the loop item that cannot be filled are appended to ``missing``."""
    wp = workflow_parameters or {}
    outs = outputs if outputs is not None else {}

    def one(m: re.Match[str]) -> str:
        ref = m.group(1)
        found, value = _lookup(ref, wp, outs, item, has_item, current)
        if found:
            return _as_text(value)
        ours = ref.startswith(_PORTAL_REFS) or ref == "item" or ref.startswith("item.")
        ours = ours and not (ref in ("tasks.name", "steps.name") and current is None)
        if ours and missing is not None:
            missing.append(ref)
        return m.group(0)

    return _REF.sub(one, text) if "{{" in text else text


def resolve_arguments(
    arguments: Arguments,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
    strict: bool = True,
    current: str | None = None,
) -> dict[str, Any]:
    """A unit's arguments as an Argo ``arguments`` object with every portal reference filled:
    parameter values get text, an artifact ``from: {{tasks.X.outputs.artifacts.y}}`` becomes
    the upstream artifact's location. ``strict`` raises ``Unresolved`` for anything missing."""
    missing: list[str] = []
    params: list[dict[str, Any]] = []
    for p in arguments.parameters:
        entry: dict[str, Any] = {"name": p.name}
        if p.value is not None:
            entry["value"] = substitute(
                p.value,
                workflow_parameters,
                outputs,
                item=item,
                has_item=has_item,
                missing=missing,
                current=current,
            )
        elif p.default is not None:
            entry["value"] = p.default
        if p.value_from is not None and p.value is None:
            entry["valueFrom"] = dict(p.value_from)
        params.append(entry)
    arts: list[dict[str, Any]] = []
    for a in arguments.artifacts:
        arts.append(_resolve_artifact(a, workflow_parameters, outputs, item, has_item, missing))
    if strict and missing:
        raise Unresolved(sorted(set(missing)))
    out: dict[str, Any] = {}
    if params:
        out["parameters"] = params
    if arts:
        out["artifacts"] = arts
    return out


def _resolve_artifact(
    a: Artifact,
    workflow_parameters: Mapping[str, str] | None,
    outputs: Mapping[str, TaskOutputs] | None,
    item: Any,
    has_item: bool,
    missing: list[str],
) -> dict[str, Any]:
    raw = {k: v for k, v in a.raw.items() if k != "from"}
    if a.from_:
        m = _REF.fullmatch(a.from_.strip())
        found, value = (False, None)
        if m:
            found, value = _lookup(
                m.group(1),
                workflow_parameters or {},
                (outputs if outputs is not None else {}),
                item,
                has_item,
            )
        if found and isinstance(value, Mapping):
            # The upstream artifact's location, under this argument's name.
            loc = {
                k: copy.deepcopy(v)
                for k, v in value.items()
                if k not in ("name", "path", "mode", "from")
            }
            return {**raw, **loc, "name": a.name}
        if m and m.group(1).startswith(("tasks.", "steps.")):
            missing.append(m.group(1))
        return {**raw, "from": a.from_}
    text = json.dumps(raw)
    filled = substitute(
        text, workflow_parameters, outputs, item=item, has_item=has_item, missing=missing
    )
    resolved: dict[str, Any] = json.loads(filled) if filled != text else raw
    return resolved


# --------------------------------------------------------------------------------------------
# depends / when

FINAL_PHASES = frozenset({"Succeeded", "Failed", "Error", "Skipped", "Omitted"})


def _group(phases: str | Sequence[str] | None) -> list[str] | None:
    if phases is None:
        return None
    group = [phases] if isinstance(phases, str) else list(phases)
    if not group or any(p not in FINAL_PHASES for p in group):
        return None
    return group


def evaluate_depends(expr: str, phases: Mapping[str, str | Sequence[str] | None]) -> bool | None:
    """Argo's ``depends`` over finished upstream tasks: True (run), False (omit), or None (an
    upstream task is not finished yet). ``phases`` maps task names to a phase, or to the list
    of phases of an expanded task. A bare ``A`` means ``A.Succeeded || A.Skipped || A.Daemoned``;
    an empty expression is True."""
    if not expr.strip():
        return True
    tree = parse_depends(expr.strip())
    groups: dict[str, list[str]] = {}
    for task in tree.tasks():
        g = _group(phases.get(task))
        if g is None:
            return None
        groups[task] = g
    return _eval_depends(tree, groups)


def _eval_depends(node: DependsExpr, groups: Mapping[str, list[str]]) -> bool:
    if node.op == "and":
        return all(_eval_depends(a, groups) for a in node.args)
    if node.op == "or":
        return any(_eval_depends(a, groups) for a in node.args)
    if node.op == "not":
        return not _eval_depends(node.args[0], groups)
    g = groups[node.task]
    result = node.result
    if result is None:
        return all(p in ("Succeeded", "Skipped") for p in g)
    if result == "AnySucceeded":
        return any(p == "Succeeded" for p in g)
    if result == "AllFailed":
        return all(p == "Failed" for p in g)
    if result == "Daemoned":
        return False
    phase = _group_phase(g)
    return phase == {"Errored": "Error"}.get(result, result)


def _group_phase(g: Sequence[str]) -> str:
    if len(g) == 1:
        return g[0]
    if any(p == "Error" for p in g):
        return "Error"
    if any(p == "Failed" for p in g):
        return "Failed"
    if all(p == "Skipped" for p in g):
        return "Skipped"
    if all(p == "Omitted" for p in g):
        return "Omitted"
    return "Succeeded"


class WhenError(ValueError):
    pass


_WHEN_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|>=|<=|=~|!~|&&|\|\||[<>!()])"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<num>[+-]?\d+(?:\.\d+)?(?![\w.\-/:]))"
    r"|(?P<word>[^\s()=!<>&|'\"]+))"
)


def evaluate_when(
    expr: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    *,
    item: Any = None,
    has_item: bool = False,
) -> bool:
    """Argo's ``when`` after substitution, in the govaluate subset Argo's examples use:
    ``==``, ``!=``, ``<``, ``>``, ``<=``, ``>=``, ``=~``, ``!~``, ``&&``, ``||``, ``!``,
    parentheses, quoted strings, numbers, ``true``/``false``, and bare words as strings.
    Raises ``WhenError`` when it cannot be evaluated (also when a reference is missing)."""
    missing: list[str] = []
    text = substitute(
        expr, workflow_parameters, outputs, item=item, has_item=has_item, missing=missing
    )
    if missing:
        raise WhenError(f"unresolved: {', '.join(sorted(set(missing)))}")
    if "{{" in text:
        # {{=expr}} (Argo's expr language) and references Argo fills are not evaluated here.
        raise WhenError(f"cannot evaluate {text.strip()[:80]!r} before Argo fills it")
    tokens: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _WHEN_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise WhenError(f"cannot read {text[pos:].strip()[:20]!r}")
        pos = m.end()
        if m.group("op"):
            tokens.append(("op", m.group("op")))
        elif m.group("str") is not None:
            tokens.append(("val", m.group("str")[1:-1].encode().decode("unicode_escape")))
        elif m.group("num") is not None:
            tokens.append(("val", float(m.group("num"))))
        else:
            word = m.group("word")
            tokens.append(("val", {"true": True, "false": False}.get(word, word)))
    return bool(_WhenParser(tokens).parse())


class _WhenParser:
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def parse(self) -> Any:
        if not self.tokens:
            raise WhenError("empty expression")
        value = self.or_()
        if self.pos != len(self.tokens):
            raise WhenError(f"unexpected {self.tokens[self.pos][1]!r}")
        return value

    def peek(self) -> str | None:
        if self.pos < len(self.tokens) and self.tokens[self.pos][0] == "op":
            return str(self.tokens[self.pos][1])
        return None

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.pos += 1
            right = self.and_()
            value = _truthy(value) or _truthy(right)
        return value

    def and_(self) -> Any:
        value = self.cmp()
        while self.peek() == "&&":
            self.pos += 1
            right = self.cmp()
            value = _truthy(value) and _truthy(right)
        return value

    def cmp(self) -> Any:
        left = self.unary()
        op = self.peek()
        if op in ("==", "!=", "<", ">", "<=", ">=", "=~", "!~"):
            self.pos += 1
            right = self.unary()
            return _compare(op, left, right)
        return left

    def unary(self) -> Any:
        if self.pos >= len(self.tokens):
            raise WhenError("expression ends too early")
        kind, value = self.tokens[self.pos]
        if kind == "op" and value == "!":
            self.pos += 1
            return not _truthy(self.unary())
        if kind == "op" and value == "(":
            self.pos += 1
            inner = self.or_()
            if self.peek() != ")":
                raise WhenError("missing ')'")
            self.pos += 1
            return inner
        if kind == "op":
            raise WhenError(f"unexpected {value!r}")
        self.pos += 1
        return value


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.lower() == "true"
    return bool(v)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _compare(op: str, left: Any, right: Any) -> bool:
    if op in ("=~", "!~"):
        try:
            hit = re.search(str(right), _as_text(left)) is not None
        except re.error as exc:
            raise WhenError(f"bad regular expression {right!r}: {exc}") from None
        return hit if op == "=~" else not hit
    ln, rn = _number(left), _number(right)
    if ln is not None and rn is not None:
        a: Any = ln
        b: Any = rn
    elif isinstance(left, bool) or isinstance(right, bool):
        a, b = _truthy(left), _truthy(right)
    else:
        a, b = _as_text(left), _as_text(right)
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    try:
        return bool({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op])
    except TypeError:
        raise WhenError(f"cannot compare {left!r} {op} {right!r}") from None


# --------------------------------------------------------------------------------------------
# Step workflows


def step_workflow_name(run_name: str, unit_slug: str, attempt: int) -> str:
    """``<run-name>-<unit-slug>-<attempt>``, DNS-1123, at most 63 characters."""
    return dns_name(run_name, unit_slug, str(attempt))


def emitted_template_names(parsed: ParsedWorkflow, keys: Sequence[str]) -> dict[str, str]:
    """Template key → name in the step workflow. Local templates keep their names; catalogue
    templates become ``<workflowtemplate>-<template>`` (deduplicated), inline ones
    ``<task>-inline``."""
    taken = {k for k in keys if not k.startswith(("ref:", "cref:", "inline:"))}
    names: dict[str, str] = {k: k for k in taken}
    for k in keys:
        if k in names:
            continue
        if k.startswith(("ref:", "cref:")):
            wft, _, tmpl = k.partition(":")[2].partition("/")
            base = f"{wft}-{tmpl}"
        else:
            base = "inline-" + hashlib.sha256(k.encode()).hexdigest()[:8]
        base = re.sub(r"[^A-Za-z0-9-]+", "-", base).strip("-")[:120] or "t"
        name, n = base, 1
        while name in names.values():
            n += 1
            name = f"{base}-{n}"
        names[k] = name
    return names


def _rewrite_calls(
    template: Any, scope: str, parsed: ParsedWorkflow, names: Mapping[str, str]
) -> Any:
    """Copy of a template whose steps / tasks / hooks call the emitted names (no templateRef)."""
    t = copy.deepcopy(template)

    def key_for(call: Mapping[str, Any]) -> str | None:
        if call.get("template"):
            name = str(call["template"])
            return name if not scope else f"{scope}/{name}"
        ref = call.get("templateRef")
        if isinstance(ref, Mapping):
            kind = "cref" if ref.get("clusterScope") else "ref"
            return f"{kind}:{ref.get('name')}/{ref.get('template')}"
        return None

    def fix(call: Any) -> None:
        if not isinstance(call, dict):
            return
        k = key_for(call)
        if k is not None and k in names:
            call.pop("templateRef", None)
            call["template"] = names[k]
        on_exit = call.get("onExit")
        if isinstance(on_exit, str) and on_exit:
            k2 = on_exit if not scope else f"{scope}/{on_exit}"
            if k2 in names:
                call["onExit"] = names[k2]
        hooks = call.get("hooks")
        if isinstance(hooks, dict):
            for hook in hooks.values():
                fix(hook)
        inline = call.get("inline")
        if isinstance(inline, dict):
            call["inline"] = _rewrite_calls(inline, scope, parsed, names)

    for group in t.get("steps") or []:
        for step in group if isinstance(group, list) else []:
            fix(step)
    dag = t.get("dag")
    if isinstance(dag, dict):
        for task in dag.get("tasks") or []:
            fix(task)
    hooks = t.get("hooks")
    if isinstance(hooks, dict):
        for hook in hooks.values():
            fix(hook)
    return t


def step_workflow(
    parsed: ParsedWorkflow,
    unit: Unit,
    *,
    run_name: str,
    run_id: str | int,
    attempt: int = 1,
    namespace: str,
    site: str | None,
    reason: str,
    workflow_parameters: Mapping[str, str] | None = None,
    outputs: Mapping[str, TaskOutputs] | None = None,
    domain: str = DEFAULT_DOMAIN,
    image_mirror: str | None = None,
) -> dict[str, Any]:
    """The Argo Workflow that runs ``unit`` (DESIGN section 3).

    ``site`` None means runtime placement (label ``P/placement=runtime``). ``workflow_parameters``
    are the run's resolved parameters (default: as submitted); ``outputs`` are the upstream
    units' outputs by task/step name. The unit's template is the entrypoint; a task's arguments
    become the workflow's arguments (Argo feeds them to the entrypoint's inputs by name), beside
    the run's workflow parameters that templates may read as ``{{workflow.parameters.x}}``; on a
    name clash the task's value wins. Raises ``Unresolved`` when an upstream output is missing,
    ``ValueError`` for a ``withParam`` unit not yet expanded.
    """
    if unit.runtime_expansion:
        raise ValueError(
            f"unit {unit.name!r} expands at run time (withParam): expand it first "
            "with placement.parser.expand_with_param"
        )
    keys = labels_for(domain)
    wp = dict(parsed.workflow_parameters())
    if workflow_parameters:
        wp.update(workflow_parameters)
    names = emitted_template_names(parsed, unit.templates)
    templates = []
    for k in unit.templates:
        t = _rewrite_calls(parsed.templates[k], parsed.template_scopes.get(k, ""), parsed, names)
        t["name"] = names[k]
        templates.append(t)

    if unit.kind == "workflow":
        args: dict[str, Any] = {}
    else:
        args = resolve_arguments(
            unit.arguments,
            wp,
            outputs,
            item=unit.item,
            has_item=unit.item_index is not None,
            current=unit.task,
        )
    params = {p["name"]: p for p in args.get("parameters", [])}
    merged = [{"name": n, "value": v} for n, v in wp.items() if n not in params]
    merged += list(params.values())
    arguments: dict[str, Any] = {}
    if merged:
        arguments["parameters"] = merged
    if args.get("artifacts"):
        arguments["artifacts"] = args["artifacts"]
    elif unit.kind == "workflow":
        wf_args = parsed.spec.get("arguments")
        if isinstance(wf_args, Mapping) and wf_args.get("artifacts"):
            arguments["artifacts"] = copy.deepcopy(list(wf_args["artifacts"]))

    spec: dict[str, Any] = {
        k: copy.deepcopy(v) for k, v in parsed.spec.items() if k not in _NOT_INHERITED
    }
    spec["entrypoint"] = names[unit.template]
    spec["templates"] = templates
    if arguments:
        spec["arguments"] = arguments

    labels = {
        keys["managed"]: "true",
        keys["run"]: label_value(str(run_id)),
        keys["unit"]: label_value(unit.slug),
        keys["attempt"]: str(attempt),
    }
    if site:
        labels[keys["site"]] = label_value(site)
    else:
        labels[keys["placement"]] = "runtime"
    if unit.resources.gpus:
        labels[keys["gpu"]] = "true"
    wf: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": {
            "name": step_workflow_name(run_name, unit.slug, attempt),
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                keys["reason"]: " ".join(reason.split())[:1024],
                f"{domain}/unit-name": unit.name,
            },
        },
        "spec": spec,
    }
    if image_mirror:
        wf = mirror_images(wf, image_mirror)
    return wf


_IMAGE_FIELDS = ("container", "script")


def _with_registry(image: str, mirror: str) -> str:
    """``ghcr.io/eo/ingest:1`` → ``<mirror>/eo/ingest:1``;
    ``busybox`` → ``<mirror>/library/busybox`` (Docker Hub's implicit namespace)."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        path = rest
    else:
        path = image if sep else f"library/{image}"
    return f"{mirror.rstrip('/')}/{path}"


def image_paths(workflow: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(JSON pointer, image) of every container image in a Workflow's templates."""
    out: list[tuple[str, str]] = []
    for i, t in enumerate(workflow.get("spec", {}).get("templates") or []):
        for fld in _IMAGE_FIELDS:
            c = t.get(fld)
            if isinstance(c, Mapping) and isinstance(c.get("image"), str):
                out.append((f"/spec/templates/{i}/{fld}/image", c["image"]))
        cs = t.get("containerSet")
        if isinstance(cs, Mapping):
            for j, c in enumerate(cs.get("containers") or []):
                if isinstance(c, Mapping) and isinstance(c.get("image"), str):
                    out.append(
                        (f"/spec/templates/{i}/containerSet/containers/{j}/image", c["image"])
                    )
        for key in ("initContainers", "sidecars"):
            for j, c in enumerate(t.get(key) or []):
                if isinstance(c, Mapping) and isinstance(c.get("image"), str):
                    out.append((f"/spec/templates/{i}/{key}/{j}/image", c["image"]))
    return out


def image_mirror_patch(workflow: Mapping[str, Any], mirror: str) -> list[dict[str, Any]]:
    """JSONPatch operations (for the webhook) that move every image to a registry mirror."""
    return [
        {"op": "replace", "path": path, "value": _with_registry(image, mirror)}
        for path, image in image_paths(workflow)
    ]


def mirror_images(workflow: Mapping[str, Any], mirror: str) -> dict[str, Any]:
    """A copy of ``workflow`` with every image pulled from ``mirror``."""
    out = copy.deepcopy(dict(workflow))
    for op in image_mirror_patch(out, mirror):
        parts = op["path"].strip("/").split("/")
        node: Any = out
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[parts[-1]] = op["value"]
    return out
