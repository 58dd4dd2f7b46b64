"""`python -m sandbox`: serve the fleet, or drive its faults (`python -m sandbox fault ...`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sandbox.faults import FAULT_TYPES
from sandbox.watchcache import UPPER_BOUND

if TYPE_CHECKING:
    from sandbox.config import Config

log = logging.getLogger("sandbox")


def write_kubeconfig(
    path: Path, url: str, users: dict[str, str], namespace: str = "default"
) -> None:
    """A kubeconfig with a context per identity (name: token); the first is current."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": {"server": url}}],
        "users": [
            {"name": f"sandbox-{name}", "user": {"token": token}} for name, token in users.items()
        ],
        "contexts": [
            {
                "name": "sandbox" if i == 0 else f"sandbox-{name}",
                "context": {
                    "cluster": "sandbox",
                    "user": f"sandbox-{name}",
                    "namespace": namespace,
                },
            }
            for i, name in enumerate(users)
        ],
        "current-context": "sandbox",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # Its users' tokens are credentials: owner-only, as kubectl writes kubeconfigs.
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


async def serve(
    config: Config,
    host: str,
    port: int,
    kubeconfig: Path | None,
    server_url: str | None = None,
    portal_kubeconfig: Path | None = None,
) -> None:
    # Imported here so that `python -m sandbox fault ...` starts fast.
    from aiohttp import web

    from sandbox.apiserver.app import Api
    from sandbox.core import Sandbox
    from sandbox.heap import keep_frozen

    sandbox = Sandbox(config)
    app = Api(sandbox).make_app()
    url = f"http://{host}:{port}"
    # Listening on 0.0.0.0 (a container) gives an address clients cannot dial; they need
    # the name they reach this server by (e.g. http://sandbox:18443 in docker compose).
    dial = (server_url or url).rstrip("/")
    tokens = {name: token for name, (token, _user) in sandbox.authz.identities.items()}
    if portal_kubeconfig is not None:
        # The portal's own (its ServiceAccount), as an operator builds it from the token
        # Secret of deploy/karmada/rbac.yaml; written first, so that a client taking the
        # admin kubeconfig's appearance as "ready" finds both.
        write_kubeconfig(portal_kubeconfig, dial, {"portal": tokens["portal"]})
    if kubeconfig is not None:
        # An operator's (system:admin), with a context for every other identity too.
        write_kubeconfig(kubeconfig, dial, tokens)
    # Listening after the kubeconfigs are written: a client that finds the server answering
    # finds its credentials too.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=512)
    await site.start()
    controllers = asyncio.create_task(sandbox.run())
    heap = asyncio.create_task(keep_frozen())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(
        f"sandbox fleet serving at {url} ({', '.join(sandbox.sites)}); "
        f"time scale {config.time_scale}",
        flush=True,
    )
    await stop.wait()
    controllers.cancel()
    heap.cancel()
    # Open watches would hold the shutdown for their whole timeout; end them now.
    for watcher in list(sandbox.store.watchers):
        watcher.queue.put_nowait(None)
    for member in sandbox.members.values():
        member.clear()
    await sandbox.karmada.webhooks.close()
    await runner.cleanup()


def _serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sandbox", description="Karmada + Argo sandbox fleet over HTTP"
    )
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--fleet", type=Path, help="fleet YAML (default: the demo fleet)")
    p.add_argument("--kubeconfig", type=Path, help="write a kubeconfig here")
    p.add_argument(
        "--server-url",
        help="server address to write into the kubeconfig (default: http://HOST:PORT)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulated seconds per real second (default 1)",
    )
    p.add_argument(
        "--crds",
        type=Path,
        action="append",
        default=[],
        help="CRD file or folder to validate against (repeatable)",
    )
    p.add_argument("--label-domain", default="portal.multisite.io")
    p.add_argument(
        "--default-duration",
        type=float,
        default=10.0,
        help="simulated seconds a leaf runs without a duration annotation",
    )
    p.add_argument(
        "--event-log",
        type=int,
        default=UPPER_BOUND,
        help="at most this many events kept per resource for watch resumption (kube-apiserver's "
        f"watch cache: at least 75 s of them, up to {UPPER_BOUND:,})",
    )
    p.add_argument(
        "--bookmark-interval", type=float, default=30.0, help="real seconds between watch BOOKMARKs"
    )
    _authz_arguments(p)
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--execute",
        action="store_true",
        help="really run steps (isolated with bubblewrap); this runs submitted code",
    )
    p.add_argument(
        "--data-dir", type=Path, help="pods' folders and artifact buckets (default: a temp dir)"
    )
    return p


def _authz_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--portal-kubeconfig",
        type=Path,
        help="write a kubeconfig with the portal's identity (its ServiceAccount) here",
    )
    p.add_argument(
        "--rbac",
        type=Path,
        action="append",
        default=[],
        help="RBAC manifests to store on karmada-apiserver at start and reset (repeatable)",
    )
    p.add_argument(
        "--member-rbac",
        type=Path,
        action="append",
        default=[],
        help="RBAC manifests every member cluster holds (repeatable); objects without a "
        "namespace go to the portal's",
    )
    p.add_argument(
        "--portal-service-account",
        default="portal/portal",
        help="NAMESPACE/NAME of the portal's ServiceAccount (default portal/portal)",
    )
    p.add_argument(
        "--anonymous-auth",
        action="store_true",
        help="requests without credentials are system:anonymous (default: a superuser, as "
        "kube-apiserver's old insecure port; kubectl sends no token over plain HTTP)",
    )


def _serve_main(argv: list[str]) -> int:
    p = _serve_parser()
    args = p.parse_args(argv)
    from sandbox.config import Config

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = Config(
        fleet=args.fleet,
        time_scale=args.time_scale,
        crds=args.crds,
        label_domain=args.label_domain,
        default_duration=args.default_duration,
        event_log_size=args.event_log,
        bookmark_interval=args.bookmark_interval,
        execute=args.execute,
        data_dir=args.data_dir,
        rbac=args.rbac,
        member_rbac=args.member_rbac,
        portal_service_account=args.portal_service_account,
        anonymous_auth=args.anonymous_auth,
    )
    if args.execute:
        from sandbox import executor

        if not executor.available():
            raise SystemExit("--execute needs bubblewrap (/usr/bin/bwrap) and setpriv")
        if args.data_dir is not None and not executor.reachable(args.data_dir):
            raise SystemExit(
                f"--data-dir {args.data_dir}: steps run as other users and cannot reach it "
                "(every folder above it needs o+x)"
            )
    asyncio.run(
        serve(
            config, args.host, args.port, args.kubeconfig, args.server_url, args.portal_kubeconfig
        )
    )
    return 0


def _server_url(url: str | None, kubeconfig: Path | None) -> str:
    if url:
        return url.rstrip("/")
    if kubeconfig is not None:
        kc = yaml.safe_load(kubeconfig.read_text())
        return str(kc["clusters"][0]["cluster"]["server"]).rstrip("/")
    raise SystemExit("give --url or --kubeconfig")


def _request(method: str, url: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        raise SystemExit(f"{err.code}: {err.read().decode()}") from err


def _fault_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sandbox fault",
        description="Inject, list or clear faults of a running sandbox fleet.",
    )
    p.add_argument("--url", help="sandbox URL, e.g. http://127.0.0.1:18443")
    p.add_argument("--kubeconfig", type=Path, help="read the URL from this kubeconfig")
    p.add_argument("action", choices=[*sorted(FAULT_TYPES), "list", "clear"])
    p.add_argument("--site")
    p.add_argument("--workflow")
    p.add_argument("--namespace")
    p.add_argument("--template")
    p.add_argument("--status", type=int)
    p.add_argument("--delay", type=float)
    p.add_argument("--count", type=int)
    p.add_argument("--duration", type=float, help="real seconds the fault lasts")
    p.add_argument("--path", help="only API paths with this prefix")
    p.add_argument("--message")
    p.add_argument("--id", help="with clear: remove only this fault")
    args = p.parse_args(argv)
    base = _server_url(args.url, args.kubeconfig) + "/_sandbox/faults"
    if args.action == "list":
        out = _request("GET", base)
    elif args.action == "clear":
        out = _request("DELETE", f"{base}/{args.id}" if args.id else base)
    else:
        spec = {"type": args.action}
        for key in (
            "site",
            "workflow",
            "namespace",
            "template",
            "status",
            "delay",
            "count",
            "duration",
            "path",
            "message",
        ):
            value = getattr(args, key)
            if value is not None:
                spec[key] = value
        out = _request("POST", base, spec)
    print(json.dumps(out, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "fault":
        return _fault_main(argv[1:])
    if argv and argv[0] == "serve":
        argv = argv[1:]
    return _serve_main(argv)


if __name__ == "__main__":
    sys.exit(main())
