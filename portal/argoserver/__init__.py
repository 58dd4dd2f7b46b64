"""Argo Server's HTTP API over the portal's runs (``/argo/api/v1/...``): the subset that Hera,
the argo CLI and the generated argo-workflows SDK call, shaped as Argo Server's swagger and its
``server/`` code answer. A namespace is a project. A thin adapter: every write is a service of
``portal.services``, every read a selector."""
