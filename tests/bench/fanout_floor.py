"""The floor of ``bench_fanout.py``'s creation figure: raw ``kubernetes``-client creates on the
same sandbox, of the portal's own step workflow body (the floor) or of a minimal Workflow (the
floor as it was taken before), and the floor's Workflows deleted before a second fan-out."""

from __future__ import annotations

import concurrent.futures
import statistics
import threading
import time
from typing import Any

from tests.bench.benchstack import BenchStack, cpu_s

DOMAIN = "portal.multisite.io"
# The floor: raw creates of the portal's own step workflow body, as many as the fan-out (up to
# RAW_FLOOR_MAX, then the rate scaled), eight clients at once. A sample of a thousand, as the
# floor was taken before, took from 1.6 to 4.4 s on the same sandbox in the same run (scaled:
# 16 to 44 s), as it fell on the sandbox's periodic work or not; ten thousand average over it.
RAW_FLOOR_MAX = 10_000
# The floor before, printed beside for comparison: a minimal body, RAW_ROUNDS timings of
# RAW_SAMPLE creates, the median scaled to the fan-out.
RAW_SAMPLE = 1000
RAW_ROUNDS = 3


def raw_creates(
    stack: BenchStack,
    n: int,
    clients: int = 8,
    prefix: str = "raw",
    body: dict[str, Any] | None = None,
) -> float:
    """Floor: n Workflows created with the raw client on the same sandbox, ``clients`` at once:
    ``body`` under new names, or a minimal Workflow."""
    from kubernetes import client, config

    body = body or {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"labels": {"bench": "raw", f"{DOMAIN}/site": "site-000"}},
        "spec": {
            "entrypoint": "w",
            "templates": [
                {
                    "name": "w",
                    "metadata": {"annotations": {f"{DOMAIN}/sandbox-duration": "36000s"}},
                    "container": {"image": "alpine:3.19", "command": ["true"]},
                }
            ],
        },
    }
    local = threading.local()

    def one(i: int) -> None:
        if not hasattr(local, "api"):
            local.api = client.CustomObjectsApi(
                config.new_client_from_config(str(stack.kubeconfig))
            )
        obj = {**body, "metadata": {**body["metadata"], "name": f"{prefix}-{i}"}}
        local.api.create_namespaced_custom_object(
            "argoproj.io", "v1alpha1", "portal", "workflows", obj
        )

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(n)))
    return time.perf_counter() - start


def portal_body(stack: BenchStack, run_id: int) -> dict[str, Any]:
    """One of the fan-out's step workflows as the portal sent it (what karmada-apiserver
    added taken away: its uid, versions, Karmada's claim labels), for raw creates of the very
    objects the portal creates."""
    from kubernetes import client, config

    name = stack.sql(
        "SELECT workflow_name FROM portal_unitrun WHERE run_id = %s AND workflow_name <> '' "
        "LIMIT 1",
        run_id,
    )[0][0]
    api = client.CustomObjectsApi(config.new_client_from_config(str(stack.kubeconfig)))
    wf = api.get_namespaced_custom_object("argoproj.io", "v1alpha1", "portal", "workflows", name)
    meta = wf["metadata"]

    def ours(fields: dict[str, str] | None) -> dict[str, str]:
        return {k: v for k, v in (fields or {}).items() if "karmada.io" not in k}

    return {
        "apiVersion": wf["apiVersion"],
        "kind": wf["kind"],
        "metadata": {
            # bench=raw: the floor's copies are deleted with the minimal ones (raw_remove).
            "labels": {**ours(meta.get("labels")), "bench": "raw"},
            "annotations": ours(meta.get("annotations")),
        },
        "spec": wf["spec"],
    }


# The sandbox is settled when it used less than this share of a core in each of
# SETTLED_WINDOWS one-second windows in a row.
SETTLED_SHARE = 0.25
SETTLED_WINDOWS = 2


def settle(stack: BenchStack, limit: float = 180.0) -> float:
    """Wait until the sandbox is done with what the fan-out left it (its bindings scheduled,
    their statuses aggregated and watched): a create answered does not mean Karmada is done
    with the object, and the floor timed on a sandbox still working through ten thousand
    of them paid for the fan-out's work (29 to 39 s in runs of the same code). Returns how
    long it took."""
    start = time.perf_counter()
    quiet = 0
    before = cpu_s(stack)["sandbox"][0]
    while quiet < SETTLED_WINDOWS and time.perf_counter() - start < limit:
        time.sleep(1.0)
        now = cpu_s(stack)["sandbox"][0]
        quiet = quiet + 1 if now - before < SETTLED_SHARE else 0
        before = now
    return time.perf_counter() - start


def raw_floor(stack: BenchStack, items: int, body: dict[str, Any], prefix: str) -> float:
    """The floor for ``items`` creates: ``body`` created raw as many times (up to
    ``RAW_FLOOR_MAX``, the time then scaled)."""
    n = min(items, RAW_FLOOR_MAX)
    return raw_creates(stack, n, prefix=prefix, body=body) * items / n


def raw_remove(stack: BenchStack) -> float:
    """The floor's Workflows deleted, and the sandbox left to collect their bindings: the
    second fan-out then runs on a sandbox holding the first one only, as it did before the
    floor took ten thousand creates. Returns how long it took."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(stack.kubeconfig))
    api = client.CustomObjectsApi(api_client)
    start = time.perf_counter()
    api.delete_collection_namespaced_custom_object(
        "argoproj.io", "v1alpha1", "portal", "workflows", label_selector="bench=raw"
    )

    def count(group: str, version: str, plural: str, selector: str = "") -> int:
        page = api.list_namespaced_custom_object(
            group, version, "portal", plural, limit=1, label_selector=selector
        )
        return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)

    # Collected: the floor's Workflows gone, and as many bindings three polls in a row.
    seen: list[int] = []

    def collected() -> bool:
        seen.append(count("work.karmada.io", "v1alpha2", "resourcebindings"))
        steady = len(seen) >= 3 and len(set(seen[-3:])) == 1
        return steady and count("argoproj.io", "v1alpha1", "workflows", "bench=raw") == 0

    while not collected():
        if time.perf_counter() - start > 900:
            raise SystemExit("timed out after 900s waiting for the floor's bindings collected")
        time.sleep(1.0)
    return time.perf_counter() - start


def raw_sampled(stack: BenchStack, n: int, items: int, prefix: str) -> float:
    """The floor as it was taken before: the median of ``RAW_ROUNDS`` timings of ``n`` raw
    creates of a minimal Workflow, scaled to ``items``. One timing of a thousand creates took
    from 16 to 52 s scaled, as it fell on the sandbox's background work (a slice of its full
    pass, the tail of the fan-out's statuses) or not."""
    rounds = [raw_creates(stack, n, prefix=f"{prefix}-{r}") for r in range(RAW_ROUNDS)]
    return statistics.median(rounds) * items / n
