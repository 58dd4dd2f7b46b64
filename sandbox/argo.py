"""Argo-like execution inside one member cluster.

Each propagated Workflow runs as an asyncio task that walks its templates (dag, steps and the
leaf kinds) the way Argo's controller does, writing an Argo-shaped status. Leaves hold their
resource requests against the member's capacity while they run and wait Pending when it is
full. It imitates what the portal reads back (phases, nodes, outputs); it runs no containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import quantity
from sandbox.fleet import DEFAULT_CAPACITY, Site
from sandbox.store import Obj, clone, now_iso

if TYPE_CHECKING:
    from sandbox.core import Sandbox

log = logging.getLogger("sandbox.argo")

LEAF_KINDS = ("container", "script", "resource", "containerSet", "data", "http", "plugin")
# Bounds runaway recursion (e.g. coinflip-recursive with a result that never changes).
MAX_NODE_NAME = 2000
DONE = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")
FAILED = ("Failed", "Error")
_VAR_RE = re.compile(r"\{\{\s*([^{}=][^{}]*?)\s*\}\}")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


# -- small helpers -------------------------------------------------------------------------
def parse_duration(value: Any, default: float) -> float:
    if value is None or value == "":
        return default
    if isinstance(value, int | float):
        return float(value)
    total = 0.0
    matched = False
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", str(value)):
        matched = True
        total += float(num) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "": 1}[unit]
    return total if matched else default


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def as_param(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render(value: Any, scope: dict[str, Any]) -> Any:
    """Substitute the {{...}} variables that scope knows; leave the rest for a later pass,
    as Argo resolves step outputs only once those steps have run."""
    if isinstance(value, str):
        if "{{" not in value:
            return value

        def sub(m: re.Match[str]) -> str:
            key = m.group(1).strip()
            if key in scope and not isinstance(scope[key], dict):
                return as_param(scope[key])
            return m.group(0)

        return _VAR_RE.sub(sub, value)
    if isinstance(value, dict):
        return {k: render(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, scope) for v in value]
    return value


def template_requests(tmpl: dict[str, Any]) -> dict[str, float]:
    req: dict[str, float] = {}
    containers = []
    for kind in ("container", "script"):
        if isinstance(tmpl.get(kind), dict):
            containers.append(tmpl[kind])
    if isinstance(tmpl.get("containerSet"), dict):
        containers.extend(tmpl["containerSet"].get("containers") or [])
    for c in containers:
        res = c.get("resources") or {}
        amounts = quantity.parse_map(res.get("requests") or res.get("limits"))
        for k, v in amounts.items():
            req[k] = req.get(k, 0.0) + v
    return req


def workflow_requests(wf: Obj) -> dict[str, float]:
    """What the largest single leaf of a workflow needs: a cluster without that much free
    cannot run it, which is what the scheduler's fit check is about."""
    out: dict[str, float] = {}
    for tmpl in (wf.get("spec") or {}).get("templates") or []:
        if any(k in tmpl for k in LEAF_KINDS):
            for k, v in template_requests(tmpl).items():
                out[k] = max(out.get(k, 0.0), v)
    return out


# -- a govaluate-ish expression evaluator for `when` and `depends` ---------------------------
_TOKEN_RE = re.compile(
    r"\s*(?:(?P<str>'[^']*'|\"[^\"]*\")|(?P<op>==|!=|<=|>=|=~|!~|&&|\|\||[<>!()])"
    r"|(?P<word>[^\s()=!<>&|]+))"
)


class ExprError(ValueError):
    pass


def evaluate(expr: str, word: Callable[[str], Any] | None = None) -> bool:
    tokens: list[tuple[str, str]] = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN_RE.match(expr, pos)
        if not m or m.end() == pos:
            raise ExprError(f"cannot parse {expr!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
    it = iter([*tokens, ("end", "")])
    cur = [next(it)]

    def peek() -> tuple[str, str]:
        return cur[0]

    def take() -> tuple[str, str]:
        tok = cur[0]
        cur[0] = next(it)
        return tok

    def atom() -> Any:
        kind, val = take()
        if kind == "op" and val == "(":
            v = or_()
            if take() != ("op", ")"):
                raise ExprError("missing )")
            return v
        if kind == "op" and val == "!":
            return not truthy(atom())
        if kind == "str":
            return val[1:-1]
        if kind == "word":
            if word is not None:
                return word(val)
            return literal(val)
        raise ExprError(f"unexpected {val!r}")

    def cmp() -> Any:
        left = atom()
        kind, val = peek()
        if kind == "op" and val in ("==", "!=", "<", ">", "<=", ">=", "=~", "!~"):
            take()
            return compare(left, val, atom())
        return left

    def not_() -> Any:
        if peek() == ("op", "!"):
            take()
            return not truthy(not_())
        return cmp()

    def and_() -> Any:
        v = not_()
        while peek() == ("op", "&&"):
            take()
            rhs = not_()
            v = truthy(v) and truthy(rhs)
        return v

    def or_() -> Any:
        v = and_()
        while peek() == ("op", "||"):
            take()
            rhs = and_()
            v = truthy(v) or truthy(rhs)
        return v

    result = or_()
    if peek()[0] != "end":
        raise ExprError(f"trailing tokens in {expr!r}")
    return truthy(result)


def literal(val: str) -> Any:
    if val in ("true", "false"):
        return val == "true"
    try:
        return float(val)
    except ValueError:
        return val


def truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v not in ("", "false")
    return bool(v)


def compare(a: Any, op: str, b: Any) -> bool:
    if op in ("=~", "!~"):
        found = re.search(str(b), as_param(a)) is not None
        return found if op == "=~" else not found
    if (
        isinstance(a, float | int)
        and isinstance(b, float | int)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        x: Any = a
        y: Any = b
    else:
        x, y = as_param(a), as_param(b)
    if op == "==":
        return bool(x == y)
    if op == "!=":
        return bool(x != y)
    if op == "<":
        return bool(x < y)
    if op == ">":
        return bool(x > y)
    if op == "<=":
        return bool(x <= y)
    return bool(x >= y)


# -- the member cluster ----------------------------------------------------------------------
@dataclass
class Lease:
    req: dict[str, float]
    node: str


@dataclass
class Member:
    sb: Sandbox
    name: str
    capacity: dict[str, float]
    baseline: dict[str, float]
    nodes: list[str]
    bucket: str
    kubernetes_version: str
    leases: dict[int, Lease] = field(default_factory=dict)
    waiters: list[tuple[dict[str, float], asyncio.Future[int]]] = field(default_factory=list)
    runs: dict[tuple[str, str], WorkflowRun] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    _rr: int = 0

    @classmethod
    def for_cluster(cls, sb: Sandbox, name: str, site: Site | None, cluster: Obj) -> Member:
        if site is None:
            raw = (cluster["metadata"].get("annotations") or {}).get(
                sb.config.annotation("capacity")
            )
            try:
                cap = quantity.parse_map(json.loads(raw) if raw else DEFAULT_CAPACITY)
            except ValueError:
                cap = quantity.parse_map(DEFAULT_CAPACITY)
            site = Site(name=name, capacity=cap, bucket=f"{name}-artifacts")
        return cls(
            sb=sb,
            name=name,
            capacity=dict(site.capacity),
            baseline=dict(site.baseline),
            nodes=[f"{name}-node-{i}" for i in range(max(site.nodes, 1))],
            bucket=site.bucket,
            kubernetes_version=site.kubernetes_version,
        )

    # capacity -------------------------------------------------------------------------------
    @property
    def allocated(self) -> dict[str, float]:
        out = dict(self.baseline)
        for lease in self.leases.values():
            for k, v in lease.req.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def pending_requests(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for req, _fut in self.waiters:
            for k, v in req.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def fits(self, req: dict[str, float]) -> bool:
        alloc = self.allocated
        for k, v in req.items():
            if v > self.capacity.get(k, 0.0) - alloc.get(k, 0.0) + 1e-9:
                return False
        return True

    def free_fraction(self) -> float:
        cpu = self.capacity.get("cpu", 0.0)
        return (cpu - self.allocated.get("cpu", 0.0)) / cpu if cpu else 0.0

    def _grant(self, req: dict[str, float]) -> int:
        lease_id = next(self._ids)
        self._rr = (self._rr + 1) % len(self.nodes)
        self.leases[lease_id] = Lease(req, self.nodes[self._rr])
        return lease_id

    async def acquire(self, req: dict[str, float], on_wait: Callable[[str], None]) -> int:
        req = dict(req, pods=req.get("pods", 0.0) + 1)
        if not self.waiters and self.fits(req):
            return self._grant(req)
        short = [
            k
            for k, v in req.items()
            if v > self.capacity.get(k, 0.0) - self.allocated.get(k, 0.0) + 1e-9
        ]
        on_wait(
            f"Unschedulable: 0/{len(self.nodes)} nodes are available: "
            + ", ".join(f"Insufficient {k}" for k in short or ["resources"])
            + "."
        )
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiters.append((req, fut))
        self.sb.poke()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())
            self.waiters = [w for w in self.waiters if w[1] is not fut]
            raise

    def release(self, lease_id: int) -> None:
        if self.leases.pop(lease_id, None) is None:
            return
        still = []
        for req, fut in self.waiters:
            if fut.done():
                continue
            if self.fits(req):
                fut.set_result(self._grant(req))
            else:
                still.append((req, fut))
        self.waiters = still
        self.sb.poke()

    def node_of(self, lease_id: int) -> str:
        lease = self.leases.get(lease_id)
        return lease.node if lease else self.nodes[0]

    # workflows ------------------------------------------------------------------------------
    def apply(self, obj: Obj) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        run = self.runs.get(key)
        if run is None:
            run = WorkflowRun(self, obj)
            self.runs[key] = run
            run.start()
        else:
            run.update(obj)

    def delete(self, namespace: str, name: str) -> None:
        run = self.runs.pop((namespace, name), None)
        if run is not None:
            run.cancel()

    def orphans(self, live: set[tuple[str, str]]) -> list[tuple[str, str]]:
        return [k for k in self.runs if k not in live]

    def clear(self) -> None:
        for run in self.runs.values():
            run.cancel()
        self.runs.clear()
        self.leases.clear()
        for _req, fut in self.waiters:
            if not fut.done():
                fut.cancel()
        self.waiters.clear()

    def status_version(self, namespace: str, name: str) -> int | None:
        run = self.runs.get((namespace, name))
        return run.version if run else None

    def status_of(self, namespace: str, name: str) -> Obj | None:
        run = self.runs.get((namespace, name))
        return run.render_status() if run else None

    def resume(self, namespace: str, name: str, node: str | None) -> int:
        run = self.runs.get((namespace, name))
        return run.resume(node) if run else 0

    def pod_log(
        self, namespace: str, pod: str, container: str, tail_lines: int | None
    ) -> str | None:
        """The log of one pod (a Pod node's id) of this member's workflows, the last
        `tail_lines` lines if given; None when there is no such pod. A stub until steps really
        run: lines from the node's phase, outputs and message."""
        for (ns, _name), run in self.runs.items():
            node = run.nodes.get(pod) if ns == namespace else None
            if node is None or node.get("type") != "Pod":
                continue
            display = f"{node.get('displayName', pod)} ({container})"
            phase = node.get("phase", "")
            if phase == "Pending":
                return ""
            # Append-only, as a real log: what a follower saw stays a prefix.
            lines = [f"{display} started"]
            if phase in DONE:
                outputs = node.get("outputs") or {}
                if outputs.get("result"):
                    lines.extend(str(outputs["result"]).splitlines())
                for p in outputs.get("parameters") or []:
                    lines.append(f"{p.get('name')}={p.get('value', '')}")
                if node.get("message"):
                    lines.append(str(node["message"]))
                lines.append(f"{display} {phase}")
            if tail_lines is not None:
                lines = lines[-tail_lines:] if tail_lines > 0 else []
            return "".join(line + "\n" for line in lines)
        return None

    def workflow_objects(self) -> list[Obj]:
        return [dict(clone(r.obj), status=r.render_status()) for r in self.runs.values()]

    def summary(self) -> dict[str, Any]:
        return {
            "capacity": quantity.fmt_map(self.capacity),
            "allocated": quantity.fmt_map(self.allocated),
            "waiting": len(self.waiters),
            "workflows": {f"{k[0]}/{k[1]}": r.phase for k, r in self.runs.items()},
        }


Parent = str | list[str] | None


class StepFailed(Exception):
    pass


@dataclass
class Ctx:
    """What a template invocation sees: its boundary and the variables in scope."""

    scope: dict[str, Any]
    boundary: str | None
    attempt: int = 0


class WorkflowRun:
    def __init__(self, member: Member, obj: Obj) -> None:
        self.member = member
        self.sb = member.sb
        self.obj = obj
        meta = obj["metadata"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.nodes: dict[str, dict[str, Any]] = {}
        self.phase = "Pending"
        self.started_at: str | None = None
        self.finished_at: str | None = None
        self.message = ""
        self.outputs: dict[str, Any] = {}
        self.version = 1
        self._rendered: tuple[int, Obj] | None = None
        self.task: asyncio.Task[None] | None = None
        self.main: asyncio.Task[dict[str, Any]] | None = None
        self.shutdown: str | None = None
        self.deadline_exceeded = False
        self.resumes: dict[str, tuple[asyncio.Event, dict[str, Any]]] = {}
        self.unsuspended = asyncio.Event()
        spec = obj.get("spec") or {}
        if not spec.get("suspend"):
            self.unsuspended.set()
        par = spec.get("parallelism")
        self.parallel = asyncio.Semaphore(int(par)) if par else None
        self.templates = {t.get("name"): t for t in spec.get("templates") or []}
        self.global_scope: dict[str, Any] = {
            "workflow.name": self.name,
            "workflow.namespace": self.namespace,
            "workflow.uid": meta.get("uid", ""),
            "workflow.serviceAccountName": spec.get("serviceAccountName", "default"),
        }
        for k, v in (meta.get("labels") or {}).items():
            self.global_scope[f"workflow.labels.{k}"] = v
        for k, v in (meta.get("annotations") or {}).items():
            self.global_scope[f"workflow.annotations.{k}"] = v
        for p in (spec.get("arguments") or {}).get("parameters") or []:
            if "value" in p:
                self.global_scope[f"workflow.parameters.{p['name']}"] = as_param(p["value"])

    # -- lifecycle ----------------------------------------------------------------------------
    def touch(self) -> None:
        self.version += 1
        self.sb.karmada.mark((self.namespace, self.name))
        self.sb.poke()

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def update(self, obj: Obj) -> None:
        self.obj = obj
        spec = obj.get("spec") or {}
        if spec.get("suspend"):
            self.unsuspended.clear()
        else:
            self.unsuspended.set()
        shutdown = spec.get("shutdown")
        if (
            shutdown in ("Stop", "Terminate")
            and self.shutdown is None
            and self.phase in ("Pending", "Running")
        ):
            self.shutdown = shutdown
            if self.main is not None and not self.main.done():
                self.main.cancel()
        self.touch()

    def _deadline(self) -> None:
        if self.main is not None and not self.main.done():
            self.deadline_exceeded = True
            self.shutdown = "Terminate"
            self.main.cancel()

    def resume(self, node: str | None) -> int:
        count = 0
        for node_id, (event, _values) in self.resumes.items():
            n = self.nodes.get(node_id) or {}
            if node in (None, n.get("name"), n.get("displayName"), node_id) and not event.is_set():
                event.set()
                count += 1
        if not self.unsuspended.is_set():
            self.unsuspended.set()
            count += 1
        return count

    def annotation(self, tmpl: dict[str, Any], name: str) -> str | None:
        key = self.sb.config.annotation(name)
        value = ((tmpl.get("metadata") or {}).get("annotations") or {}).get(key)
        if value is None:
            value = (self.obj["metadata"].get("annotations") or {}).get(key)
        return None if value is None else str(value)

    async def run(self) -> None:
        spec = self.obj.get("spec") or {}
        self.phase = "Running"
        self.started_at = now_iso()
        self.touch()
        entry = spec.get("entrypoint") or ""
        scope = dict(self.global_scope)
        args = {
            p["name"]: as_param(p["value"])
            for p in (spec.get("arguments") or {}).get("parameters") or []
            if "value" in p
        }
        root: dict[str, Any] | None = None
        try:
            loop = asyncio.get_running_loop()
            self.main = loop.create_task(
                self.execute(entry, args, {}, self.name, self.name, Ctx(scope, None), parent=None)
            )
            deadline = spec.get("activeDeadlineSeconds")
            timer = (
                loop.call_later(float(deadline) / self.sb.config.time_scale, self._deadline)
                if deadline is not None
                else None
            )
            try:
                root = await self.main
            except asyncio.CancelledError:
                if self.shutdown is None:
                    raise
                root = self.nodes.get(self.name)
            finally:
                if timer is not None:
                    timer.cancel()
            phase = (root or {}).get("phase", "Error")
            if self.deadline_exceeded:
                phase = "Failed"
                self.message = "Max duration limit exceeded"
            elif self.shutdown:
                phase = "Failed"
                self.message = f"Stopped with strategy '{self.shutdown}'"
            elif phase in FAILED:
                self.message = (root or {}).get("message") or f"child '{self.name}' failed"
            on_exit = spec.get("onExit")
            if on_exit and self.shutdown != "Terminate":
                exit_scope = dict(
                    self.global_scope,
                    **{
                        "workflow.status": phase,
                        "workflow.failures": json.dumps(
                            [
                                {
                                    "displayName": n["displayName"],
                                    "message": n.get("message", ""),
                                    "templateName": n.get("templateName", ""),
                                    "phase": n["phase"],
                                    "podName": n["id"],
                                    "finishedAt": n.get("finishedAt", ""),
                                }
                                for n in self.nodes.values()
                                if n["type"] == "Pod" and n["phase"] in FAILED
                            ]
                        ),
                    },
                )
                exit_node = await self.execute(
                    on_exit,
                    {},
                    {},
                    f"{self.name}.onExit",
                    f"{self.name}.onExit",
                    Ctx(exit_scope, None),
                    parent=None,
                )
                if exit_node["phase"] in FAILED and phase == "Succeeded":
                    phase = "Failed"
                    self.message = exit_node.get("message") or "exit handler failed"
            if root is not None and root.get("outputs"):
                self.outputs = clone(root["outputs"])
            self.phase = phase if phase in ("Succeeded", "Failed", "Error") else "Succeeded"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # pragma: no cover - a bug in the engine, shown as Argo would
            log.exception("workflow %s/%s crashed", self.namespace, self.name)
            self.phase = "Error"
            self.message = str(exc)
        self.finished_at = now_iso()
        self.touch()

    # -- status -------------------------------------------------------------------------------
    def render_status(self) -> Obj:
        if self._rendered is not None and self._rendered[0] == self.version:
            return self._rendered[1]
        pods = [n for n in self.nodes.values() if n["type"] == "Pod"]
        done = sum(1 for n in pods if n["phase"] == "Succeeded")
        status: Obj = {
            "phase": self.phase,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "progress": f"{done}/{len(pods)}",
            "nodes": clone(self.nodes),
        }
        if self.message:
            status["message"] = self.message
        if self.outputs:
            status["outputs"] = clone(self.outputs)
        if self.phase in DONE:
            status["conditions"] = [
                {"type": "PodRunning", "status": "False"},
                {"type": "Completed", "status": "True"},
            ]
        else:
            running = any(n["phase"] == "Running" for n in pods)
            status["conditions"] = [
                {"type": "PodRunning", "status": "True" if running else "False"}
            ]
        cpu = sum(n.get("resourcesDuration", {}).get("cpu", 0) for n in pods)
        mem = sum(n.get("resourcesDuration", {}).get("memory", 0) for n in pods)
        status["resourcesDuration"] = {"cpu": cpu, "memory": mem}
        status["artifactRepositoryRef"] = {
            "default": True,
            "artifactRepository": {
                "s3": {
                    "bucket": self.member.bucket,
                    "endpoint": f"s3.{self.member.name}.sandbox.invalid",
                }
            },
        }
        self._rendered = (self.version, status)
        return status

    # -- nodes --------------------------------------------------------------------------------
    def node_id(self, name: str) -> str:
        return self.name if name == self.name else f"{self.name}-{fnv32a(name)}"

    def new_node(
        self, name: str, display: str, ntype: str, tmpl_name: str, ctx: Ctx, parent: Parent
    ) -> dict[str, Any]:
        node_id = self.node_id(name)
        node: dict[str, Any] = {
            "id": node_id,
            "name": name,
            "displayName": display,
            "type": ntype,
            "templateName": tmpl_name,
            "templateScope": f"local/{self.name}",
            "phase": "Pending",
            "startedAt": now_iso(),
        }
        if ctx.boundary:
            node["boundaryID"] = ctx.boundary
        self.nodes[node_id] = node
        for pid in [parent] if isinstance(parent, str) else parent or []:
            if pid in self.nodes:
                children = self.nodes[pid].setdefault("children", [])
                if node_id not in children:
                    children.append(node_id)
        self.touch()
        return node

    def finish(self, node: dict[str, Any], phase: str, message: str = "") -> dict[str, Any]:
        node["phase"] = phase
        node["finishedAt"] = now_iso()
        if message:
            node["message"] = message
        if node["type"] == "Pod":
            node["progress"] = "1/1" if phase == "Succeeded" else "0/1"
        self.touch()
        return node

    # -- execution ----------------------------------------------------------------------------
    async def execute(
        self,
        tmpl_name: str,
        args: dict[str, str],
        art_args: dict[str, Any],
        name: str,
        display: str,
        ctx: Ctx,
        parent: Parent,
        inline: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        tmpl = inline or self.templates.get(tmpl_name)
        if tmpl is None or len(name) > MAX_NODE_NAME:
            node = self.new_node(name[:MAX_NODE_NAME], display, "Pod", tmpl_name, ctx, parent)
            why = (
                f"template {tmpl_name!r} not found"
                if tmpl is None
                else "nesting too deep (recursion without an end?)"
            )
            if tmpl is None and not tmpl_name:
                why = "templateRef / WorkflowTemplates are not simulated by the sandbox"
            return self.finish(node, "Error", why)
        strategy = tmpl.get("retryStrategy")
        if not strategy:
            return await self.execute_once(tmpl, args, art_args, name, display, ctx, parent)
        limit = (
            int(render(str(strategy.get("limit", 0)), ctx.scope) or 0)
            if str(strategy.get("limit", "")).strip().lstrip("-").isdigit()
            else 0
        )
        policy = strategy.get("retryPolicy") or "OnFailure"
        retry = self.new_node(name, display, "Retry", tmpl.get("name", tmpl_name), ctx, parent)
        retry["phase"] = "Running"
        backoff = parse_duration((strategy.get("backoff") or {}).get("duration"), 0.0)
        attempt_node: dict[str, Any] = retry
        try:
            for attempt in range(limit + 1):
                sub = Ctx(dict(ctx.scope, retries=str(attempt)), ctx.boundary, attempt)
                attempt_node = await self.execute_once(
                    tmpl,
                    args,
                    art_args,
                    f"{name}({attempt})",
                    f"{display}({attempt})",
                    sub,
                    retry["id"],
                )
                phase = attempt_node["phase"]
                if phase not in FAILED:
                    break
                if policy == "OnError" and phase != "Error":
                    break
                if (
                    policy in ("OnFailure", "OnTransientError")
                    and phase == "Error"
                    and policy != "OnTransientError"
                ):
                    break
                if attempt < limit and backoff:
                    await asyncio.sleep(backoff / self.sb.config.time_scale)
        except asyncio.CancelledError:
            self.finish(retry, "Failed", self._shutdown_message())
            raise
        if attempt_node.get("outputs"):
            retry["outputs"] = clone(attempt_node["outputs"])
        return self.finish(retry, attempt_node["phase"], attempt_node.get("message", ""))

    def _shutdown_message(self) -> str:
        if self.deadline_exceeded:
            return "Step exceeded its deadline"
        return (
            f"workflow shutdown with strategy:  {self.shutdown}"
            if self.shutdown
            else "workflow deleted"
        )

    def _inputs(
        self, tmpl: dict[str, Any], args: dict[str, str], art_args: dict[str, Any], ctx: Ctx
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        scope = dict(self.global_scope)
        for k, v in ctx.scope.items():
            if k.startswith("workflow."):
                scope[k] = v
        inputs: dict[str, Any] = {}
        params = []
        for p in (tmpl.get("inputs") or {}).get("parameters") or []:
            pname = p.get("name")
            if pname in args:
                value = args[pname]
            elif "value" in p:
                value = as_param(render(p["value"], scope))
            elif "default" in p:
                value = as_param(render(p["default"], scope))
            else:
                raise StepFailed(f"inputs.parameters.{pname} was not supplied")
            scope[f"inputs.parameters.{pname}"] = value
            params.append({"name": pname, "value": value})
        if params:
            inputs["parameters"] = params
        arts = []
        for a in (tmpl.get("inputs") or {}).get("artifacts") or []:
            art = clone(art_args.get(a.get("name"), {}))
            art = dict(clone(a), **{k: v for k, v in art.items() if k != "name"})
            if a.get("path"):
                scope[f"inputs.artifacts.{a['name']}.path"] = a["path"]
            arts.append(art)
        if arts:
            inputs["artifacts"] = arts
        if params:
            scope["inputs.parameters"] = json.dumps(params)
        return inputs, scope

    async def execute_once(
        self,
        tmpl: dict[str, Any],
        args: dict[str, str],
        art_args: dict[str, Any],
        name: str,
        display: str,
        ctx: Ctx,
        parent: Parent,
    ) -> dict[str, Any]:
        tname = tmpl.get("name", "")
        if "steps" in tmpl:
            ntype = "Steps"
        elif "dag" in tmpl:
            ntype = "DAG"
        elif "suspend" in tmpl:
            ntype = "Suspend"
        else:
            ntype = "Pod"
        node = self.new_node(name, display, ntype, tname, ctx, parent)
        try:
            inputs, scope = self._inputs(tmpl, args, art_args, ctx)
        except StepFailed as exc:
            return self.finish(node, "Error", str(exc))
        if inputs:
            node["inputs"] = inputs
        body = render(
            {k: v for k, v in tmpl.items() if k not in ("steps", "dag", "outputs")}, scope
        )
        scope["pod.name"] = node["id"]
        scope["node.name"] = name
        sub = Ctx(scope, ctx.boundary, ctx.attempt)
        try:
            if ntype == "Steps":
                await self.run_steps(tmpl, node, sub)
            elif ntype == "DAG":
                await self.run_dag(tmpl, node, sub)
            elif ntype == "Suspend":
                await self.run_suspend(body, tmpl, node, sub)
            elif any(k in tmpl for k in LEAF_KINDS):
                await self.run_leaf(body, tmpl, node, sub)
            else:
                return self.finish(node, "Error", f"template {tname!r} has nothing to run")
        except asyncio.CancelledError:
            if node["phase"] not in DONE:
                self.finish(node, "Failed", self._shutdown_message())
            raise
        return node

    # leaves ---------------------------------------------------------------------------------
    def _leaf_outputs(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], failed: bool
    ) -> None:
        given_raw = self.annotation(tmpl, "outputs")
        try:
            given = json.loads(given_raw) if given_raw else {}
        except ValueError:
            given = {}
        outputs: dict[str, Any] = {}
        params = []
        for p in (tmpl.get("outputs") or {}).get("parameters") or []:
            pname = p.get("name")
            vf = p.get("valueFrom") or {}
            if pname in given:
                value = as_param(given[pname])
            elif "value" in p:
                value = as_param(render(p["value"], scope))
            elif "default" in vf:
                value = as_param(render(vf["default"], scope))
            elif "parameter" in vf:
                value = as_param(render(vf["parameter"], scope))
            else:
                value = f"{pname}-{node['id']}"
            params.append(
                {
                    "name": pname,
                    "value": value,
                    **({"globalName": p["globalName"]} if p.get("globalName") else {}),
                }
            )
            if p.get("globalName"):
                self.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
        if params:
            outputs["parameters"] = params
        arts = []
        sizes_raw = self.annotation(tmpl, "artifact-sizes")
        try:
            sizes = json.loads(sizes_raw) if sizes_raw else {}
        except ValueError:
            sizes = {}
        for a in (tmpl.get("outputs") or {}).get("artifacts") or []:
            if failed and not a.get("optional"):
                continue
            if a.get("from"):
                ref = scope.get(str(a["from"]).strip("{} "))
                art = dict(clone(ref), name=a["name"]) if isinstance(ref, dict) else clone(a)
            else:
                suffix = "" if (a.get("archive") or {}).get("none") is not None else ".tgz"
                key = (a.get("s3") or {}).get(
                    "key"
                ) or f"{self.name}/{node['id']}/{a['name']}{suffix}"
                art = {k: v for k, v in clone(a).items() if k not in ("s3", "archive")}
                art["s3"] = {
                    "bucket": self.member.bucket,
                    "endpoint": f"s3.{self.member.name}.sandbox.invalid",
                    "key": key,
                }
                art["size"] = int(sizes.get(a["name"], 1048576))
            arts.append(art)
        if arts:
            outputs["artifacts"] = arts
        result = self.annotation(tmpl, "result")
        if result is None and "result" in given:
            result = as_param(given["result"])
        if result is None and "script" in tmpl:
            # Argo captures a script's stdout as its result; the sandbox runs nothing, so the
            # script printed nothing unless an annotation says what it printed.
            result = ""
        if result is not None:
            outputs["result"] = result
        outputs["exitCode"] = self.annotation(tmpl, "exit-code") or ("1" if failed else "0")
        if failed and outputs["exitCode"] == "0":
            outputs["exitCode"] = "1"
        node["outputs"] = outputs

    def _failure(self, tmpl: dict[str, Any], ctx: Ctx) -> str | None:
        msg = self.sb.faults.workflow_failure(
            self.namespace, self.name
        ) or self.sb.faults.template_failure(self.namespace, self.name, tmpl.get("name", ""))
        if msg:
            return msg
        fail = self.annotation(tmpl, "fail")
        if fail and fail.lower() not in ("false", "0", "no"):
            return "Error (exit code 1)" if fail.lower() in ("true", "1", "yes") else fail
        attempts = self.annotation(tmpl, "fail-attempts")
        if attempts and attempts.isdigit() and ctx.attempt < int(attempts):
            return f"Error (exit code 1): failing attempt {ctx.attempt} of {attempts}"
        return None

    async def run_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        if self.parallel is not None:
            async with self.parallel:
                await self._run_leaf(body, tmpl, node, ctx)
        else:
            await self._run_leaf(body, tmpl, node, ctx)

    async def _run_leaf(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        await self.unsuspended.wait()
        req = template_requests(body)

        def waiting(msg: str) -> None:
            node["message"] = msg
            self.touch()

        lease = await self.member.acquire(req, waiting)
        started = asyncio.get_running_loop().time()
        try:
            node.pop("message", None)
            node["phase"] = "Running"
            node["startedAt"] = now_iso()
            node["hostNodeName"] = self.member.node_of(lease)
            self.touch()
            default = parse_duration(
                (self.obj["metadata"].get("annotations") or {}).get(
                    self.sb.config.annotation("duration")
                ),
                self.sb.config.default_duration,
            )
            duration = parse_duration(self.annotation(tmpl, "duration"), default)
            await asyncio.sleep(duration / self.sb.config.time_scale)
        except asyncio.CancelledError:
            self._account(node, req, started)
            self.member.release(lease)
            raise
        self._account(node, req, started)
        self.member.release(lease)
        failure = self._failure(tmpl, ctx)
        self._leaf_outputs(tmpl, node, ctx.scope, failed=failure is not None)
        if failure:
            self.finish(node, "Failed", failure)
        else:
            self.finish(node, "Succeeded")

    def _account(self, node: dict[str, Any], req: dict[str, float], started: float) -> None:
        secs = max(
            1, int((asyncio.get_running_loop().time() - started) * self.sb.config.time_scale)
        )
        node["resourcesDuration"] = {
            "cpu": int(secs * max(req.get("cpu", 0.1), 0.001)) or 1,
            "memory": int(secs * req.get("memory", 0) / 2**20) or 1,
        }

    async def run_suspend(
        self, body: dict[str, Any], tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx
    ) -> None:
        node["phase"] = "Running"
        self.touch()
        duration = (body.get("suspend") or {}).get("duration")
        event = asyncio.Event()
        values: dict[str, Any] = {}
        self.resumes[node["id"]] = (event, values)
        if duration not in (None, ""):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    event.wait(), parse_duration(duration, 0.0) / self.sb.config.time_scale
                )
        else:
            await event.wait()
        self._leaf_outputs(tmpl, node, ctx.scope, failed=False)
        node["outputs"].pop("exitCode", None)
        if not node["outputs"]:
            node.pop("outputs")
        self.finish(node, "Succeeded")

    # steps ----------------------------------------------------------------------------------
    def _expand(self, step: dict[str, Any], scope: dict[str, Any]) -> list[Any] | None:
        if "withItems" in step:
            return list(render(step["withItems"], scope) or [])
        if "withParam" in step:
            raw = render(step["withParam"], scope)
            if isinstance(raw, list):
                return raw
            if str(raw).strip() == "":
                return []
            try:
                items = json.loads(raw)
            except ValueError as exc:
                raise StepFailed(
                    f"withParam value could not be parsed as a JSON list: {raw}"
                ) from exc
            if not isinstance(items, list):
                raise StepFailed(f"withParam value is not a JSON list: {raw}")
            return items
        if "withSequence" in step:
            seq = render(step["withSequence"], scope)
            fmt = seq.get("format")
            if "count" in seq:
                start = int(seq.get("start", 0))
                nums = list(range(start, start + int(seq["count"])))
            else:
                start, end = int(seq.get("start", 0)), int(seq.get("end", 0))
                nums = (
                    list(range(start, end + 1)) if end >= start else list(range(start, end - 1, -1))
                )
            return [fmt % n if fmt else str(n) for n in nums]
        return None

    @staticmethod
    def _item_scope(item: Any) -> dict[str, Any]:
        scope: dict[str, Any] = {"item": as_param(item)}
        if isinstance(item, dict):
            for k, v in item.items():
                scope[f"item.{k}"] = as_param(v)
        return scope

    @staticmethod
    def _item_label(item: Any) -> str:
        if isinstance(item, dict):
            return ",".join(f"{k}:{as_param(v)}" for k, v in sorted(item.items()))
        return as_param(item)

    def _record(
        self,
        scope: dict[str, Any],
        prefix: str,
        node: dict[str, Any],
        group: list[dict[str, Any]] | None = None,
    ) -> None:
        """Make a finished step/task's results visible as {{steps.X...}} / {{tasks.X...}}."""
        scope[f"{prefix}.status"] = node["phase"]
        scope[f"{prefix}.id"] = node["id"]
        scope[f"{prefix}.startedAt"] = node.get("startedAt", "")
        scope[f"{prefix}.finishedAt"] = node.get("finishedAt", "")
        if group is not None:
            values: dict[str, list[Any]] = {}
            results = []
            for child in group:
                outs = child.get("outputs") or {}
                for p in outs.get("parameters") or []:
                    values.setdefault(p["name"], []).append(p["value"])
                if "result" in outs:
                    results.append(literal_json(outs["result"]))
            for pname, vals in values.items():
                scope[f"{prefix}.outputs.parameters.{pname}"] = json.dumps(vals)
            scope[f"{prefix}.outputs.parameters"] = json.dumps(
                [
                    {
                        p["name"]: p["value"]
                        for p in (c.get("outputs") or {}).get("parameters") or []
                    }
                    for c in group
                ]
            )
            scope[f"{prefix}.outputs.result"] = json.dumps(results)
            return
        outs = node.get("outputs") or {}
        for p in outs.get("parameters") or []:
            scope[f"{prefix}.outputs.parameters.{p['name']}"] = p["value"]
        for a in outs.get("artifacts") or []:
            scope[f"{prefix}.outputs.artifacts.{a['name']}"] = a
        if "result" in outs:
            scope[f"{prefix}.outputs.result"] = outs["result"]
        if "exitCode" in outs:
            scope[f"{prefix}.exitCode"] = outs["exitCode"]

    def _call_args(
        self, call: dict[str, Any], scope: dict[str, Any]
    ) -> tuple[dict[str, str], dict[str, Any]]:
        arguments = call.get("arguments") or {}
        params = {
            p["name"]: as_param(render(p.get("value", ""), scope))
            for p in arguments.get("parameters") or []
        }
        arts: dict[str, Any] = {}
        for a in arguments.get("artifacts") or []:
            ref = a.get("from")
            if ref:
                found = scope.get(str(render(ref, scope)).strip("{} "))
                if isinstance(found, dict):
                    arts[a["name"]] = dict(clone(found), name=a["name"])
                    continue
            arts[a["name"]] = render(clone(a), scope)
        return params, arts

    async def _call(
        self,
        call: dict[str, Any],
        name: str,
        display: str,
        scope: dict[str, Any],
        boundary: str,
        parent: Parent,
    ) -> dict[str, Any]:
        params, arts = self._call_args(call, scope)
        node = await self.execute(
            call.get("template", ""),
            params,
            arts,
            name,
            display,
            Ctx(scope, boundary),
            parent,
            inline=call.get("inline"),
        )
        hook = (call.get("hooks") or {}).get("exit") or {}
        exit_tmpl = hook.get("template") or call.get("onExit")
        if exit_tmpl:
            hook_scope = dict(scope)
            prefix = "steps" if "[" in name.rsplit(".", 1)[0][-4:] or "]" in name else "tasks"
            self._record(hook_scope, f"{prefix}.{call.get('name')}", node)
            self._record(hook_scope, f"steps.{call.get('name')}", node)
            self._record(hook_scope, f"tasks.{call.get('name')}", node)
            hparams, harts = self._call_args(hook, hook_scope)
            await self.execute(
                exit_tmpl,
                hparams,
                harts,
                f"{name}.onExit",
                f"{display}.onExit",
                Ctx(hook_scope, boundary),
                parent,
            )
        return node

    async def _run_expanded(
        self,
        call: dict[str, Any],
        base: str,
        display: str,
        scope: dict[str, Any],
        boundary: str,
        parent: Parent,
        when_ok: Callable[[dict[str, Any]], bool],
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """One step or task, with its loop expanded; returns (node, loop children)."""
        items = self._expand(call, scope)
        if items is None:
            if not when_ok(scope):
                skipped = self.new_node(
                    base, display, "Skipped", call.get("template", ""), Ctx(scope, boundary), parent
                )
                return self.finish(
                    skipped, "Skipped", f"when '{render(call.get('when'), scope)}' evaluated false"
                ), None
            return await self._call(call, base, display, scope, boundary, parent), None
        group = self.new_node(
            base, display, "TaskGroup", call.get("template", ""), Ctx(scope, boundary), parent
        )
        group["phase"] = "Running"
        coros = []
        for i, item in enumerate(items):
            item_scope = dict(scope, **self._item_scope(item))
            label = f"({i}:{self._item_label(item)})"
            if not when_ok(item_scope):
                skipped = self.new_node(
                    f"{base}{label}",
                    f"{display}{label}",
                    "Skipped",
                    call.get("template", ""),
                    Ctx(item_scope, boundary),
                    group["id"],
                )
                self.finish(skipped, "Skipped", "when evaluated false")
                continue
            coros.append(
                self._call(
                    call, f"{base}{label}", f"{display}{label}", item_scope, boundary, group["id"]
                )
            )
        children = list(await asyncio.gather(*coros))
        failed = [c for c in children if c["phase"] in FAILED]
        if failed:
            self.finish(group, "Failed", f"child '{failed[0]['name']}' failed")
        else:
            self.finish(group, "Succeeded" if children or not items else "Skipped")
        return group, children

    def _when(self, call: dict[str, Any]) -> Callable[[dict[str, Any]], bool]:
        cond = call.get("when")
        if not cond:
            return lambda scope: True

        def check(scope: dict[str, Any]) -> bool:
            text = render(str(cond), scope)
            if "{{=" in text:
                # The expr language ({{= ...}}) is not evaluated; such conditions run.
                return True
            if "{{" in text:
                # A variable that never got a value (e.g. the result of a step that printed
                # nothing) cannot satisfy a comparison.
                return False
            try:
                return evaluate(text)
            except ExprError:
                return False

        return check

    async def run_steps(self, tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx) -> None:
        node["phase"] = "Running"
        scope = ctx.scope
        prev = node["id"]
        failed_msg = ""
        for i, group in enumerate(tmpl.get("steps") or []):
            gname = f"{node['name']}[{i}]"
            gnode = self.new_node(
                gname, f"[{i}]", "StepGroup", tmpl.get("name", ""), Ctx(scope, node["id"]), prev
            )
            gnode["phase"] = "Running"
            prev = gnode["id"]
            steps = group if isinstance(group, list) else [group]

            async def one(
                step: dict[str, Any], gn: dict[str, Any] = gnode
            ) -> tuple[dict[str, Any], dict[str, Any], list[Any] | None]:
                n, children = await self._run_expanded(
                    step,
                    f"{gn['name']}.{step['name']}",
                    step["name"],
                    scope,
                    node["id"],
                    gn["id"],
                    self._when(step),
                )
                return step, n, children

            try:
                results = await asyncio.gather(*(one(s) for s in steps))
            except StepFailed as exc:
                self.finish(gnode, "Error", str(exc))
                self.finish(node, "Error", str(exc))
                return
            bad = []
            for step, n, children in results:
                self._record(scope, f"steps.{step['name']}", n, children)
                cont = step.get("continueOn") or {}
                if n["phase"] == "Failed" and cont.get("failed"):
                    continue
                if n["phase"] == "Error" and cont.get("error"):
                    continue
                if n["phase"] in FAILED:
                    bad.append(n)
            if bad:
                failed_msg = f"child '{bad[0]['id']}' failed"
                self.finish(gnode, "Failed", failed_msg)
                self.finish(node, "Failed", failed_msg)
                return
            self.finish(gnode, "Succeeded")
        self._template_outputs(tmpl, node, scope)
        self.finish(node, "Succeeded")

    def _template_outputs(
        self, tmpl: dict[str, Any], node: dict[str, Any], scope: dict[str, Any]
    ) -> None:
        outs = tmpl.get("outputs") or {}
        if not outs:
            return
        result: dict[str, Any] = {}
        params = []
        for p in outs.get("parameters") or []:
            vf = p.get("valueFrom") or {}
            raw = vf.get("parameter", p.get("value", vf.get("default", "")))
            value = as_param(render(raw, scope))
            if "{{" in value and "default" in vf:
                value = as_param(vf["default"])
            params.append({"name": p["name"], "value": value})
            if p.get("globalName"):
                self.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
        if params:
            result["parameters"] = params
        arts = []
        for a in outs.get("artifacts") or []:
            ref = scope.get(str(render(a.get("from", ""), scope)).strip("{} "))
            if isinstance(ref, dict):
                arts.append(dict(clone(ref), name=a["name"]))
        if arts:
            result["artifacts"] = arts
        if result:
            node["outputs"] = result

    # dag ------------------------------------------------------------------------------------
    async def run_dag(self, tmpl: dict[str, Any], node: dict[str, Any], ctx: Ctx) -> None:
        node["phase"] = "Running"
        self.touch()
        dag = tmpl.get("dag") or {}
        tasks = {t["name"]: t for t in dag.get("tasks") or []}
        fail_fast = dag.get("failFast", True) is not False
        scope = ctx.scope
        deps: dict[str, set[str]] = {}
        exprs: dict[str, str] = {}
        for tname, t in tasks.items():
            if t.get("depends"):
                exprs[tname] = str(t["depends"])
                deps[tname] = {
                    w.split(".")[0]
                    for w in re.findall(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", exprs[tname])
                    if w.split(".")[0] in tasks
                }
            else:
                deps[tname] = set(t.get("dependencies") or [])
                exprs[tname] = " && ".join(deps[tname])
        handled: set[str] = set()
        for expr in exprs.values():
            for ref, _suffix in re.findall(
                r"([A-Za-z0-9_-]+)\.(Failed|Errored|AnyFailed|AllFailed|Completed)", expr
            ):
                handled.add(ref)
        for tname, t in tasks.items():
            if (t.get("continueOn") or {}).get("failed") or (t.get("continueOn") or {}).get(
                "error"
            ):
                handled.add(tname)
        results: dict[str, dict[str, Any]] = {}
        loops: dict[str, list[dict[str, Any]] | None] = {}
        running: dict[str, asyncio.Task[tuple[dict[str, Any], list[Any] | None]]] = {}
        unhandled: list[dict[str, Any]] = []
        error: str | None = None

        def parents(tname: str) -> list[str]:
            # Argo's DAG shape: tasks without dependencies hang off the DAG node, every
            # other task off the tasks it depends on.
            if not deps[tname]:
                return [node["id"]]
            return [results[d]["id"] for d in sorted(deps[tname]) if d in results]

        def task_state(word: str) -> bool:
            ref, _, suffix = word.partition(".")
            n = results.get(ref)
            if n is None:
                raise ExprError(f"unknown task {ref}")
            ph = n["phase"]
            children = list(loops.get(ref) or [])
            if suffix == "":
                return ph in ("Succeeded", "Skipped")
            if suffix == "Succeeded":
                return ph == "Succeeded"
            if suffix == "Failed":
                return ph == "Failed"
            if suffix == "Errored":
                return ph == "Error"
            if suffix == "Skipped":
                return ph == "Skipped"
            if suffix == "Omitted":
                return ph == "Omitted"
            if suffix == "Daemoned":
                return False
            if suffix == "Completed":
                return ph in ("Succeeded", "Failed")
            if suffix == "AnySucceeded":
                return any(c["phase"] == "Succeeded" for c in children)
            if suffix == "AllFailed":
                return bool(children) and all(c["phase"] in FAILED for c in children)
            if suffix == "AnyFailed":
                return any(c["phase"] in FAILED for c in children)
            raise ExprError(f"unknown task result {suffix}")

        try:
            while len(results) < len(tasks):
                stop = fail_fast and bool(unhandled)
                for tname, t in tasks.items():
                    if tname in results or tname in running:
                        continue
                    if not deps[tname] <= set(results):
                        continue
                    try:
                        ok = evaluate(exprs[tname], task_state) if exprs[tname] else True
                    except ExprError as exc:
                        error = f"invalid depends of task {tname}: {exc}"
                        ok = False
                    if not ok or stop or error:
                        omitted = self.new_node(
                            f"{node['name']}.{tname}",
                            tname,
                            "Skipped",
                            t.get("template", ""),
                            Ctx(scope, node["id"]),
                            parents(tname),
                        )
                        results[tname] = self.finish(
                            omitted, "Omitted", "omitted: depends condition not met"
                        )
                        loops[tname] = None
                        continue
                    running[tname] = asyncio.ensure_future(
                        self._run_expanded(
                            t,
                            f"{node['name']}.{tname}",
                            tname,
                            scope,
                            node["id"],
                            parents(tname),
                            self._when(t),
                        )
                    )
                if len(results) == len(tasks):
                    break
                if not running:
                    break
                done, _ = await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
                for tname in [n for n, tk in running.items() if tk in done]:
                    tk = running.pop(tname)
                    try:
                        tnode, children = tk.result()
                    except StepFailed as exc:
                        error = str(exc)
                        tnode = self.finish(
                            self.new_node(
                                f"{node['name']}.{tname}",
                                tname,
                                "Pod",
                                tasks[tname].get("template", ""),
                                Ctx(scope, node["id"]),
                                parents(tname),
                            ),
                            "Error",
                            str(exc),
                        )
                        children = None
                    results[tname] = tnode
                    loops[tname] = children
                    self._record(scope, f"tasks.{tname}", tnode, children)
                    if tnode["phase"] in FAILED and tname not in handled:
                        unhandled.append(tnode)
        except asyncio.CancelledError:
            for tk in running.values():
                tk.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            raise
        if error:
            self.finish(node, "Error", error)
            return
        if unhandled:
            self.finish(node, "Failed", f"child '{unhandled[0]['id']}' failed")
            return
        self._template_outputs(tmpl, node, scope)
        self.finish(node, "Succeeded")


def literal_json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value
