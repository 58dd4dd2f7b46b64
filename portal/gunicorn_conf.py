"""Gunicorn settings for the portal's web process: ``gunicorn -c python:portal.gunicorn_conf
portal.wsgi:application`` (docker-compose.yml, deploy/Dockerfile, deploy/host/web.yaml).

Command-line flags still win (``--bind``, ``--workers``). What this file adds: threaded
workers, and the access log on stdout, written through a logger that removes the admission
webhook's token from every field (``portal.logredact``), whatever ``--access-logformat`` says.

Threaded workers (``gthread``): a request that streams for long (a followed step log) holds one
thread, not the whole process, and the worker keeps answering gunicorn's arbiter meanwhile, so
it is not killed as a sync worker would be after ``timeout``. The portal caps follows per
process below the thread count (``PORTAL_LOG_FOLLOWS_PER_PROCESS``, 4 of 8 by default), so
probes and other requests always find a thread.
"""

from __future__ import annotations

import os
from typing import Any

from gunicorn.glogging import Logger

from portal.logredact import redact_atoms

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-")
# gunicorn's default format plus the request time; %(r)s and %(U)s are redacted.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms'


class RedactingLogger(Logger):
    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        return redact_atoms(super().atoms(resp, req, environ, request_time))


logger_class = RedactingLogger
