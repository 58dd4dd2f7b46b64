"""Authentication and authorisation of every call, on karmada-apiserver and at the members.

* **Identities**: the sandbox issues one bearer token per identity and writes them into the
  kubeconfigs it writes: ``admin`` (``system:admin`` in ``system:masters``, as the
  ``karmada-apiserver.config`` Karmada's installer writes), ``portal`` (the portal's
  ServiceAccount, ``deploy/karmada/rbac.yaml``) and ``karmada-agent-<cluster>`` for each
  pull-mode cluster (``system:karmada:agent:<cluster>``, as ``karmadactl register`` names
  it). An unknown token is a 401. A request with no credentials at all is served as
  kube-apiserver's old insecure port served it (before 1.20,
  ``pkg/kubeapiserver/server/insecure_handler.go``: the user ``system:unsecured`` in
  ``system:masters``), because the sandbox speaks plain HTTP and kubectl sends no credentials
  to a server without TLS (client-go's ``clientcmd`` reads a user's auth only for TLS); with
  ``--anonymous-auth`` it is ``system:anonymous`` instead, as on kube-apiserver's secure port
  (RBAC lets it read ``/version`` and the health paths only). The Python client, so the
  portal, always sends its token.
* **Authorisation**: kube-apiserver's RBAC (``sandbox/authz/rbac.py``) over the bootstrap
  policy and the RBAC objects stored (the shipped files given with ``--rbac`` are stored at
  start and after each reset). Rules are resolved once per identity and namespace, and the
  cache dropped when an RBAC object changes.
* **The cluster proxy at a member**: the member authenticates Karmada's impersonator, checks
  it may impersonate the caller (``impersonate`` on ``users`` or ``serviceaccounts`` and on
  each ``groups``: ``staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go``),
  then authorises the impersonated caller with the member's RBAC: its bootstrap policy, the
  files given with ``--member-rbac`` and what unified auth wrote (``bootstrap.py``).
"""

from __future__ import annotations

import logging
import secrets
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sandbox.argo.member import ClusterHost
from sandbox.authz import bootstrap
from sandbox.authz.rbac import (
    ANONYMOUS,
    AUTHENTICATED,
    SA_PREFIX,
    UNAUTHENTICATED,
    Attributes,
    Resolver,
    User,
)
from sandbox.authz.request import forbidden, request_attributes, unauthorized
from sandbox.errors import ApiError
from sandbox.resources import NAMESPACE, RBAC_TYPES
from sandbox.store import Event, Obj

log = logging.getLogger("sandbox.authz")

RBAC_KINDS = {t.kind: t for t in RBAC_TYPES}
ADMIN = User("system:admin", ("system:masters", AUTHENTICATED))
ANONYMOUS_USER = User(ANONYMOUS, (UNAUTHENTICATED,))
UNSECURED = User("system:unsecured", ("system:masters", AUTHENTICATED))
# Groups Karmada's proxy does not pass on (``SkipGroup``, pkg/util/proxy/proxy.go).
SKIPPED_GROUPS = (AUTHENTICATED, UNAUTHENTICATED)
DENIALS_KEPT = 200


def load_rbac_files(paths: list[Path], namespace: str) -> list[Obj]:
    """The RBAC objects of YAML files (other kinds, such as the ServiceAccount and its token
    Secret, are what the sandbox's fixed identities stand for). A namespaced object without a
    namespace lands in ``namespace``, as ``kubectl apply -n`` or a kustomization's
    ``namespace:`` (deploy/member's) puts it."""
    out: list[Obj] = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in RBAC_KINDS:
                continue
            meta = doc.setdefault("metadata", {})
            if RBAC_KINDS[doc["kind"]].namespaced and not meta.get("namespace"):
                meta["namespace"] = namespace
            out.append(doc)
    return out


class Authz:
    def __init__(self, sb: ClusterHost) -> None:
        self.sb = sb
        namespace, _, name = sb.config.portal_service_account.partition("/")
        self.files = load_rbac_files(sb.config.rbac, namespace)
        self.member_files = load_rbac_files(sb.config.member_rbac, namespace)
        self.identities: dict[str, tuple[str, User]] = {
            "admin": (secrets.token_urlsafe(24), ADMIN),
            "portal": (secrets.token_urlsafe(24), User.service_account(namespace, name)),
        }
        # Each pull-mode cluster's karmada-agent, with what `karmadactl register` grants it.
        self.agents = [s.name for s in sb.sites.values() if s.sync_mode == "Pull"]
        for cluster in self.agents:
            agent = User(bootstrap.AGENT_PREFIX + cluster, (bootstrap.AGENT_GROUP, AUTHENTICATED))
            self.identities[f"karmada-agent-{cluster}"] = (secrets.token_urlsafe(24), agent)
        self.tokens = {token: user for token, user in self.identities.values()}
        self._resolver: Resolver | None = None
        self._members: dict[str, tuple[Any, Resolver]] = {}
        # The last refusals (403), newest last, for /_sandbox/authz: a test stack checks that
        # the portal's identity was never refused, whatever the portal made of the error.
        self.denials: deque[Obj] = deque(maxlen=DENIALS_KEPT)
        self.denied = 0
        sb.store.listeners.append(self._changed)

    def token(self, identity: str) -> str:
        return self.identities[identity][0]

    # -- karmada-apiserver -------------------------------------------------------------------
    def _changed(self, ev: Event) -> None:
        if ev.rtype in RBAC_TYPES:
            self._resolver = None
            self._members.clear()

    def karmada_rbac(self) -> list[Obj]:
        return [o for t in RBAC_TYPES for o in self.sb.store.all(t)]

    def resolver(self) -> Resolver:
        if self._resolver is None:
            self._resolver = Resolver(self.karmada_rbac())
        return self._resolver

    def seed(self) -> None:
        """The bootstrap policy, Karmada's, and the ``--rbac`` files, into the store (what
        exists already stays: ``kubectl apply`` of the same files changes nothing)."""
        agents = [o for cluster in self.agents for o in bootstrap.agent_objects(cluster)]
        defaults = [*bootstrap.kubernetes_defaults(), *bootstrap.karmada_defaults(), *agents]
        for obj in [*defaults, *self.files]:
            rtype = RBAC_KINDS[obj["kind"]]
            meta = obj.get("metadata") or {}
            ns = meta.get("namespace") if rtype.namespaced else None
            if rtype.namespaced and not ns:
                raise ValueError(f"{obj['kind']} {meta.get('name')}: no metadata.namespace")
            if ns and self.sb.store.find(NAMESPACE, None, ns) is None:
                self.sb.store.create(NAMESPACE, {"metadata": {"name": ns}}, validate=False)
            if self.sb.store.find(rtype, ns, meta["name"]) is None:
                self.sb.store.create(rtype, obj, ns, validate=False)

    def authenticate(self, header: str | None) -> User:
        if not header:
            return ANONYMOUS_USER if self.sb.config.anonymous_auth else UNSECURED
        scheme, _, token = header.strip().partition(" ")
        user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise unauthorized()
        return user

    def authorize(self, user: User, method: str, path: str, query: Mapping[str, str]) -> Attributes:
        attrs = request_attributes(user, method, path, query)
        if not self.resolver().allows(attrs):
            raise self._denied(attrs, "karmada-apiserver")
        return attrs

    def _denied(self, attrs: Attributes, where: str) -> ApiError:
        err = forbidden(attrs)
        self.denied += 1
        self.denials.append(
            {"seq": self.denied, "where": where, "user": attrs.user.name, "message": err.message}
        )
        log.info("%s: %s", where, err.message)
        return err

    def review(self, user: User, body: Any) -> Obj:
        """A SelfSubjectAccessReview answered for ``user`` (``kubectl auth can-i``)."""
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            raise ApiError.bad_request("spec: Required value")
        res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if isinstance(res, dict):
            attrs = Attributes(
                user,
                str(res.get("verb") or ""),
                group=str(res.get("group") or ""),
                resource=str(res.get("resource") or ""),
                subresource=str(res.get("subresource") or ""),
                name=str(res.get("name") or ""),
                namespace=str(res.get("namespace") or ""),
            )
        elif isinstance(non, dict):
            attrs = Attributes(
                user, str(non.get("verb") or ""), resource_request=False, path=str(non.get("path"))
            )
        else:
            raise ApiError.bad_request(
                "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes "
                "or resourceAttributes must be specified"
            )
        allowed = self.resolver().allows(attrs)
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": {"allowed": allowed, **({} if allowed else {"reason": ""})},
        }

    # -- members (the cluster proxy) ---------------------------------------------------------
    def member_resolver(self, cluster: str) -> Resolver:
        member = self.sb.members.get(cluster)
        local = [o for k, o in (member.objects.items() if member else []) if k[0] in RBAC_KINDS]
        key = tuple(id(o) for o in local)
        cached = self._members.get(cluster)
        if cached is not None and cached[0] == key:
            return cached[1]
        objects = [
            *bootstrap.kubernetes_defaults(),
            *bootstrap.impersonator_objects(cluster, self.karmada_rbac()),
            *self.member_files,
            *local,
        ]
        resolver = Resolver(objects)
        self._members[cluster] = (key, resolver)
        return resolver

    def member_access(
        self, cluster: str, caller: User, method: str, path: str, query: Mapping[str, str]
    ) -> None:
        """What the member's API server checks of a request Karmada's proxy passes on:
        the impersonation, then the impersonated caller's own rights. Raises its 403."""
        resolver = self.member_resolver(cluster)
        impersonator = User(
            bootstrap.IMPERSONATOR_USER,
            (
                "system:serviceaccounts",
                "system:serviceaccounts:karmada-cluster",
                AUTHENTICATED,
            ),
        )
        groups = [g for g in caller.groups if g not in SKIPPED_GROUPS]
        checks: list[Attributes] = []
        if caller.name.startswith(SA_PREFIX) and caller.name.count(":") == 3:
            ns, name = caller.name[len(SA_PREFIX) :].split(":")
            checks.append(
                Attributes(
                    impersonator, "impersonate", resource="serviceaccounts", name=name, namespace=ns
                )
            )
        else:
            checks.append(
                Attributes(impersonator, "impersonate", resource="users", name=caller.name)
            )
        checks += [
            Attributes(impersonator, "impersonate", resource="groups", name=g) for g in groups
        ]
        for attrs in checks:
            if not resolver.allows(attrs):
                raise self._denied(attrs, cluster)
        # The impersonation filter adds system:authenticated to a non-anonymous user.
        as_user = User(caller.name, (*groups, AUTHENTICATED))
        attrs = request_attributes(as_user, method, path, query)
        if not resolver.allows(attrs):
            raise self._denied(attrs, cluster)
