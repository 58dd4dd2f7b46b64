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
