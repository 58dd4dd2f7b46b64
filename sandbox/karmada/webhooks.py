"""Mutating admission webhooks registered by users (MutatingWebhookConfiguration), called by
the apiserver on CREATE, honouring `rules`, `objectSelector`, `namespaceSelector`,
`failurePolicy` and `timeoutSeconds` (k8s.io/apiserver `pkg/admission/plugin/webhook/mutating`)."""

from __future__ import annotations

import base64
import json
import logging
import ssl
import uuid
from typing import Any, cast

import aiohttp

from sandbox import patch as patchlib
from sandbox.errors import ApiError
from sandbox.host import Host
from sandbox.resources import MUTATING_WEBHOOK, NAMESPACE, ResourceType
from sandbox.selectors import match_label_selector
from sandbox.store import Obj, clone, labels_of

log = logging.getLogger("sandbox.karmada")


class Webhooks:
    def __init__(self, sandbox: Host) -> None:
        self.sb = sandbox
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _session_get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    @staticmethod
    def _rule_matches(rule: dict[str, Any], rtype: ResourceType) -> bool:
        def has(key: str, value: str) -> bool:
            vals = rule.get(key) or []
            return "*" in vals or value in vals

        return (
            has("operations", "CREATE")
            and has("apiGroups", rtype.group)
            and has("apiVersions", rtype.version)
            and has("resources", rtype.plural)
        )

    async def admit(self, rtype: ResourceType, obj: Any, namespace: str | None) -> Obj:
        if not isinstance(obj, dict):
            raise ApiError.bad_request("the body must be a JSON object")
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError.bad_request("metadata must be an object")
        if rtype.namespaced and namespace:
            meta.setdefault("namespace", namespace)
        if not meta.get("name") and meta.get("generateName"):
            # The name is given before admission, so that webhooks see the final name.
            meta["name"] = str(meta["generateName"]) + uuid.uuid4().hex[:5]
        store = self.sb.store
        configs = store.list_objects(MUTATING_WEBHOOK)
        if not configs:
            return cast(Obj, obj)
        ns_labels: dict[str, str] = {}
        if meta.get("namespace"):
            ns_obj = store.find(NAMESPACE, None, meta["namespace"])
            ns_labels = labels_of(ns_obj) if ns_obj else {}
            ns_labels.setdefault("kubernetes.io/metadata.name", meta["namespace"])
        for config in configs:
            for hook in config.get("webhooks") or []:
                if not any(self._rule_matches(r, rtype) for r in hook.get("rules") or []):
                    continue
                if not match_label_selector(hook.get("objectSelector"), labels_of(obj)):
                    continue
                if rtype.namespaced and not match_label_selector(
                    hook.get("namespaceSelector"), ns_labels
                ):
                    continue
                obj = await self._call(hook, rtype, obj)
        return cast(Obj, obj)

    async def _call(self, hook: dict[str, Any], rtype: ResourceType, obj: Obj) -> Obj:
        name = hook.get("name", "")
        url = (hook.get("clientConfig") or {}).get("url")
        timeout = float(hook.get("timeoutSeconds", 10))
        uid = str(uuid.uuid4())
        try:
            response = await self._post(url, review_of(uid, rtype, obj), timeout, uid)
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.info("webhook %s failed (%s); failurePolicy Ignore", name, exc or "timeout")
                return obj
            raise ApiError(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{name}": {exc or "timeout"}',
            ) from exc
        if not response.get("allowed", False):
            status = response.get("status") or {}
            raise ApiError(
                int(status.get("code") or 400),
                status.get("reason") or "BadRequest",
                f'admission webhook "{name}" denied the request: {status.get("message", "")}',
            )
        if response.get("patch"):
            try:
                ops = json.loads(base64.b64decode(response["patch"]))
            except ValueError as exc:
                raise ApiError(
                    500, "InternalError", f'webhook "{name}" returned an invalid patch: {exc}'
                ) from exc
            patched = patchlib.json_patch(obj, ops)
            if isinstance(patched, dict):
                obj = patched
        return obj

    async def _post(
        self, url: str | None, review: dict[str, Any], timeout: float, uid: str
    ) -> dict[str, Any]:
        """The webhook's AdmissionReview response; ValueError (and aiohttp's errors) when it
        cannot be had."""
        if not url:
            raise ValueError(
                "webhook has no clientConfig.url (service references "
                "cannot be resolved from karmada-apiserver)"
            )
        ssl_ctx: ssl.SSLContext | bool = not url.startswith("https")
        async with self._session_get().post(
            url, json=review, timeout=aiohttp.ClientTimeout(total=timeout), ssl=ssl_ctx
        ) as resp:
            if resp.status != 200:
                raise ValueError(f"webhook answered HTTP {resp.status}")
            answer = await resp.json(content_type=None)
        response: dict[str, Any] = answer.get("response") or {}
        if response.get("uid") not in (None, uid):
            raise ValueError("webhook response uid does not match the request")
        return response


def review_of(uid: str, rtype: ResourceType, obj: Obj) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver sends a mutating webhook for a CREATE."""
    meta = obj["metadata"]
    kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    resource = {"group": rtype.group, "version": rtype.version, "resource": rtype.plural}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": resource,
            "requestKind": dict(kind),
            "requestResource": dict(resource),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": "CREATE",
            "userInfo": {"username": "sandbox-admin", "groups": ["system:masters"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
