"""Authentication and RBAC as kube-apiserver and Karmada's cluster proxy do them: `rbac`
(the rules), `request` (what a request asks for, its 401 and 403), `bootstrap` (the objects
servers start with), `guard` (identities and the checks on every call)."""

from sandbox.authz.guard import Authz
from sandbox.authz.rbac import Attributes, Resolver, Rule, User

__all__ = ["Attributes", "Authz", "Resolver", "Rule", "User"]
