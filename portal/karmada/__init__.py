"""The Karmada boundary: everything that talks to karmada-apiserver and reads what it gives back.

``client`` is the one module that imports ``kubernetes`` (configuration, timeouts, retries with
backoff, typed and idempotent writes); ``errors`` sorts every failure into transient or permanent;
``resources`` names the kinds; ``lists`` holds the informer-like reads (chunked lists and
watches); ``proxy`` reads a member's pods and Workflows through Karmada's cluster proxy. Above
them, ``watcher`` folds Clusters and ResourceBindings into the database, ``logs`` (with
``kept_logs``) answers a step's log, and ``node_status`` decodes a member Workflow's nodes.
"""
