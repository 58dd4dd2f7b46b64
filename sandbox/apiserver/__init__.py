"""The Kubernetes API over HTTP (aiohttp), laid out as kube-apiserver's handlers are
(`staging/src/k8s.io/apiserver/pkg/endpoints`): `app` (the application, its middleware
and the dispatch of a request to its handler), `routes` (a path as resource, namespace, name
and subresource), `discovery`, `crud` (get, list, create, update, patch, delete, tables),
`watch`, `control` (the sandbox's own `/_sandbox` endpoints) and `responses` (JSON answers
and request bodies)."""
