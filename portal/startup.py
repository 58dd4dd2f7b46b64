"""Checks every portal process makes before it serves: manage.py (runserver, migrate, the
watcher), the WSGI application (gunicorn) and Celery (worker, beat).

Not in settings.py: type checkers and tools load the settings without being a portal process.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

NO_SECRET_KEY = (
    "SECRET_KEY is not set. With DEBUG off the portal needs its own secret key: set SECRET_KEY "
    "(or SECRET_KEY_FILE), e.g. to the output of "
    "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`; "
    "for local development set DEBUG=1 instead."
)


def require_secret_key() -> None:
    """Refuse to start without DEBUG and without a SECRET_KEY, with a message that says what
    to do (Django alone would fail later, on the first request that signs something)."""
    from django.conf import settings

    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django's own "must not be empty"
        key = ""
    if not key and not settings.DEBUG:
        raise ImproperlyConfigured(NO_SECRET_KEY)
