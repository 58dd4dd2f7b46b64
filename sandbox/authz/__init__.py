"""Authentication and RBAC as kube-apiserver and Karmada's cluster proxy do them: `rbac`
(the rules), `request` (what a request asks for, its 401 and 403), `bootstrap` (the objects
servers start with), `guard` (identities and the checks on every call)."""
