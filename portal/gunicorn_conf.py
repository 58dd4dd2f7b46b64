"""Gunicorn settings for the portal's web process: ``gunicorn -c python:portal.gunicorn_conf
portal.wsgi:application`` (docker-compose.yml, deploy/Dockerfile, deploy/host/web.yaml).

Command-line flags still win (``--bind``, ``--workers``). What this file adds: the access log
on stdout, written through a logger that removes the admission webhook's token from every
field (``portal.logredact``), whatever ``--access-logformat`` says.
"""

from __future__ import annotations

import os
from typing import Any

from gunicorn.glogging import Logger

from portal.logredact import redact_atoms

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-")
# gunicorn's default format plus the request time; %(r)s and %(U)s are redacted.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms'


class RedactingLogger(Logger):
    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        return redact_atoms(super().atoms(resp, req, environ, request_time))


logger_class = RedactingLogger
