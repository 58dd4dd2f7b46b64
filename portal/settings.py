"""Settings for the multi-site workflow portal.

Everything that differs between a laptop demo, CI and production comes from environment
variables (see ``.env.example`` for each one and its default). With no ``DATABASE_URL`` the
portal uses an embedded SQLite file and with no broker a Celery filesystem transport, so the demo
runs on a machine that has only Python; tests always run against PostgreSQL and Redis.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from portal.env import env, envbool, envfloat, envint, envlist, private_dir, private_file

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", False)
# A development key only with DEBUG on (the demo). Without DEBUG there is no default: every
# process refuses to start with no key (portal.startup, called by manage.py, the WSGI
# application and Celery), and ``check --deploy`` flags a known placeholder (portal.checks).
SECRET_KEY = env("SECRET_KEY", "") or (
    "django-insecure-local-development-key-do-not-use-in-production" if DEBUG else ""
)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "sites",
    "placement",
    "portal",
]

MIDDLEWARE = [
    # First: a chunked request body (no Content-Length) is read, bounded, before anything
    # else looks at the body (portal/middleware.py).
    "portal.middleware.ChunkedBodyMiddleware",
    # NUL characters in the path, query or a form: 404/400 before any query sees them.
    "portal.middleware.NulByteMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Under DEBUG (the demo), the portal's 404 page instead of Django's technical one.
    "portal.notfound.PlainNotFoundMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = env("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 60), conn_health_checks=True
        )
    }
else:
    # The embedded demo's database holds password hashes and sessions: the folder and the file
    # are the owner's alone (0700 and 0600), as are the broker's messages and the kubeconfig
    # beside it.
    private_dir(VAR_DIR)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(private_file(VAR_DIR / "portal.sqlite3")),
            # The demo runs web, worker, watcher and beat against one file: wait on locks
            # instead of failing with "database is locked".
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env("STATIC_ROOT", str(VAR_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
# Production serves hashed, compressed files from ``collectstatic``; development and tests serve
# straight from the app folders.
STATIC_MANIFEST = envbool("STATIC_MANIFEST", not DEBUG)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if STATIC_MANIFEST
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = not STATIC_MANIFEST

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# Request bodies: workflows are limited by the parser (PORTAL_MAX_BODY_BYTES); Django refuses
# anything larger before it is read into memory.
PORTAL_MAX_BODY_BYTES = envint("PORTAL_MAX_BODY_BYTES", 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = PORTAL_MAX_BODY_BYTES
# A chunked body (no Content-Length) is read up to this many bytes, then refused with 413; each
# view then applies its own limit as it does to a body with a length. The default is the
# webhook's (an AdmissionReview of one etcd object and its envelope).
PORTAL_MAX_CHUNKED_BODY_BYTES = envint(
    "PORTAL_MAX_CHUNKED_BODY_BYTES", max(PORTAL_MAX_BODY_BYTES, 3 * 1024 * 1024)
)

# --- Cache (login and token throttling, shared by every web process) --------------------------
PORTAL_CACHE_URL = env("PORTAL_CACHE_URL", env("REDIS_URL", ""))
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": PORTAL_CACHE_URL,
            "KEY_PREFIX": "portal",
            "TIMEOUT": 300,
        }
        if PORTAL_CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# --- Throttling of failed logins and API tokens (portal/throttling.py) ----------------------
# Failures allowed per window for one username and for one client address; past either the
# login form and the API answer 429 until the window ends.
PORTAL_AUTH_FAILURES_PER_USER = envint("PORTAL_AUTH_FAILURES_PER_USER", 10)
PORTAL_AUTH_FAILURES_PER_ADDRESS = envint("PORTAL_AUTH_FAILURES_PER_ADDRESS", 50)
PORTAL_AUTH_FAILURE_WINDOW_SECONDS = envint("PORTAL_AUTH_FAILURE_WINDOW_SECONDS", 300)
# Runs one project may submit per window (portal/submission_limits.py); past it 429 with
# Retry-After until the window ends. 0: no limit.
PORTAL_SUBMISSIONS_PER_PROJECT = envint("PORTAL_SUBMISSIONS_PER_PROJECT", 120)
PORTAL_SUBMISSION_WINDOW_SECONDS = envint("PORTAL_SUBMISSION_WINDOW_SECONDS", 60)

# --- Health endpoints (portal/health.py) ----------------------------------------------------
PORTAL_READYZ_BUDGET_SECONDS = envfloat("PORTAL_READYZ_BUDGET_SECONDS", 2.0)
PORTAL_READYZ_CACHE_SECONDS = envfloat("PORTAL_READYZ_CACHE_SECONDS", 10.0)
# Error text of failed checks for everyone (default: staff only; others see a category).
PORTAL_READYZ_DETAIL = envbool("PORTAL_READYZ_DETAIL", False)
PORTAL_METRICS_TOKEN = env("PORTAL_METRICS_TOKEN", "")
PORTAL_METRICS_ALLOWED_NETWORKS = envlist("PORTAL_METRICS_ALLOWED_NETWORKS", "")

# --- Security (production defaults; DEBUG relaxes them for local use) -------------------------
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", not DEBUG)
# Probes, metrics and the admission webhook are called by machines on the internal network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$", r"^webhooks/"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("BEHIND_PROXY") else None
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", not DEBUG)
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", not DEBUG)
X_FRAME_OPTIONS = "DENY"

# --- REST API -------------------------------------------------------------------------------
# How long a process trusts an API token it has checked (portal/api/authentication.py).
PORTAL_TOKEN_CACHE_SECONDS = envint("PORTAL_TOKEN_CACHE_SECONDS", 10)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.CachedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": envint("API_PAGE_SIZE", 50),
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    # DRF's JSON, written by orjson (portal/api/renderers.py).
    "DEFAULT_RENDERER_CLASSES": [
        "portal.api.renderers.FastJSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "sites.api.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Multi-site workflow portal API",
    "DESCRIPTION": "Submit an Argo Workflow once; each step runs at the right Karmada site.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Served from the sidecar package so Swagger UI works without internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # drf-spectacular's enum naming, then the error answers every operation may give.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.schema.add_error_responses",
    ],
}

# --- Celery ---------------------------------------------------------------------------------
REDIS_URL = env("REDIS_URL", "")
CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL)
if not CELERY_BROKER_URL:
    # Embedded default: no server. kombu's filesystem transport, with the writes made atomic
    # (portal/broker.py) so the worker can poll often without reading half-written messages.
    _queue_dir = VAR_DIR / "celery-queue"
    _queue_dir.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(_queue_dir),
        "store_processed": False,
        # Broadcast/pidbox files; kombu's default is "control" in the working directory.
        "control_folder": str(VAR_DIR / "celery-control"),
        # kombu's virtual transports sleep ``polling_interval`` (1 s by default) whenever a
        # poll finds nothing, and a task's message waits that long: at 1 s a 200-item fan-out
        # left a one-step run 153 s behind. A poll is one directory listing per queue.
        "polling_interval": envfloat("CELERY_FILESYSTEM_POLL_SECONDS", 0.05),
    }
CELERY_TASK_ACKS_LATE = True  # a worker that dies mid-task leaves the message for another one
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Beat sends periodic tasks only while it holds the beat's Lease (portal/beat.py).
CELERY_BEAT_SCHEDULER = "portal.beat:LeaderScheduler"
# --- Bounded work per task and per run ------------------------------------------------------------
# No task holds a worker process for good: the soft limit raises inside the task, the hard
# one kills the process (a run whose advance keeps failing or being killed ends in Error).
CELERY_TASK_SOFT_TIME_LIMIT = envint("CELERY_TASK_SOFT_TIME_LIMIT", 120)
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", 180)
# A pool process whose resident memory is over this (MB) after a task is replaced by a fresh
# one (Celery's ``worker_max_memory_per_child``; 0: never).
CELERY_WORKER_MAX_MEMORY_PER_CHILD = envint("PORTAL_WORKER_MAX_MEMORY_MB", 0) * 1024 or None
# One advance creates at most this many step workflows, or runs this long, then yields the
# worker to other runs (the rest of a big fan-out comes in later turns).
PORTAL_ADVANCE_BATCH = envint("PORTAL_ADVANCE_BATCH", 500)
PORTAL_ADVANCE_TURN_SECONDS = envfloat("PORTAL_ADVANCE_TURN_SECONDS", 3.0)
# A turn whose budget is spent while no other run waits for a turn and no prompt advance is
# queued or running goes on for another, up to this long in all (well inside
# CELERY_TASK_SOFT_TIME_LIMIT, half of it): each new turn re-read the run and passed over all
# its units, a tenth of a lone 10,000-item fan-out's creation, and at 30 s the one new turn of
# such a fan-out still left Karmada without a create for a second
# (portal.controller.advance.Turn).
PORTAL_ADVANCE_TURN_MAX_SECONDS = envfloat("PORTAL_ADVANCE_TURN_MAX_SECONDS", 60.0)
# A run of at least this many units is kept between turns by the worker process advancing it,
# which then re-reads only the rows that changed (portal.controller.kept).
PORTAL_ADVANCE_KEEP_UNITS = envint("PORTAL_ADVANCE_KEEP_UNITS", 500)
# Advances a user waits on (a run's first, one because a unit ended) of one project queued or
# running at once; the project's further requests wait their turn
# (portal/controller/workqueue/fairness.py).
PORTAL_PROJECT_ADVANCES = envint("PORTAL_PROJECT_ADVANCES", 4)
# Step workflows created at once by one advance (threads; each create is idempotent).
PORTAL_CREATE_CONCURRENCY = envint("PORTAL_CREATE_CONCURRENCY", 4)
# Failed (or killed) advances of one run in a row before the run is marked Error.
PORTAL_ADVANCE_MAX_FAILURES = envint("PORTAL_ADVANCE_MAX_FAILURES", 3)
# A preview shows each unit's best candidates inline; the full table is a request away.
PORTAL_PREVIEW_CANDIDATES = envint("PORTAL_PREVIEW_CANDIDATES", 10)
# --- end of bounded work ---------------------------------------------------------------------

# --- Karmada and placement ------------------------------------------------------------------
KARMADA_KUBECONFIG = env("KARMADA_KUBECONFIG", "")
KARMADA_IN_CLUSTER = envbool("KARMADA_IN_CLUSTER", False)
KARMADA_NAMESPACE = env("KARMADA_NAMESPACE", "portal")
# Seconds to wait for an answer from karmada-apiserver (read) and to connect to it; every call
# passes both to the client as a (connect, read) tuple.
KARMADA_REQUEST_TIMEOUT = envfloat("KARMADA_REQUEST_TIMEOUT", 10.0)
KARMADA_CONNECT_TIMEOUT = envfloat("KARMADA_CONNECT_TIMEOUT", 3.0)
# Karmada's --cluster-status-update-frequency (10 s upstream): a step seen starting is in its
# member's resourceSummary at the latest one such period later; until then it holds its request
# (portal.selectors.held_reservations).
KARMADA_CLUSTER_STATUS_SECONDS = envfloat("KARMADA_CLUSTER_STATUS_SECONDS", 10.0)
PORTAL_LABEL_DOMAIN = env("PORTAL_LABEL_DOMAIN", "portal.multisite.io")
PORTAL_POLICY_PREFIX = env("PORTAL_POLICY_PREFIX", "portal-site-")
PORTAL_MAX_UNITS = envint("PORTAL_MAX_UNITS", 5000)
# Unit-to-unit dependencies one workflow may have (after loops expand): what checking, planning
# and drawing a run costs grows with them.
PORTAL_MAX_DEPENDENCY_EDGES = envint("PORTAL_MAX_DEPENDENCY_EDGES", 20_000)
# Pods one unit's step workflow may create (its nested loops multiplied; a loop whose size only
# the run knows counts as PORTAL_UNKNOWN_LOOP_ITEMS items, recursion to Argo's 100 nested calls).
PORTAL_MAX_PODS_PER_UNIT = envint("PORTAL_MAX_PODS_PER_UNIT", 5000)
PORTAL_UNKNOWN_LOOP_ITEMS = envint("PORTAL_UNKNOWN_LOOP_ITEMS", 1000)
# Step logs read through Karmada's cluster proxy: at most this much per read, and a followed
# log is cut after this long (the reader follows again).
PORTAL_LOG_MAX_BYTES = envint("PORTAL_LOG_MAX_BYTES", 1024 * 1024)
# The most one output parameter of a step may hold (and the last bytes of a result kept).
PORTAL_MAX_PARAMETER_BYTES = envint("PORTAL_MAX_PARAMETER_BYTES", 256 * 1024)
# How much of each output value a run, a unit and the step panel show; the rest is paged.
PORTAL_OUTPUT_PREVIEW_CHARS = envint("PORTAL_OUTPUT_PREVIEW_CHARS", 4096)
# The currency of the prices operators set per site and link; shown beside costs.
PORTAL_CURRENCY = env("PORTAL_CURRENCY", "EUR")
PORTAL_LOG_FOLLOW_SECONDS = envint("PORTAL_LOG_FOLLOW_SECONDS", 30)
# A followed log holds one web thread while it streams (portal/log_follows.py): at most this
# many at once per user (every process together) and per process (keep it below
# GUNICORN_THREADS, so that probes and other requests always find a thread).
PORTAL_LOG_FOLLOWS_PER_USER = envint("PORTAL_LOG_FOLLOWS_PER_USER", 3)
PORTAL_LOG_FOLLOWS_PER_PROCESS = envint("PORTAL_LOG_FOLLOWS_PER_PROCESS", 4)

# The Argo Server face's watch (``argo submit --watch``): each stream ends after this long (the
# argo CLI watches again; under gunicorn's worker timeout), and looks for changes this often.
PORTAL_ARGO_WATCH_SECONDS = envint("PORTAL_ARGO_WATCH_SECONDS", 20)
PORTAL_ARGO_WATCH_POLL_SECONDS = envfloat("PORTAL_ARGO_WATCH_POLL_SECONDS", 1.0)
PORTAL_FAILOVER_GRACE_SECONDS = envint("PORTAL_FAILOVER_GRACE_SECONDS", 120)
PORTAL_RESYNC_SECONDS = envint("PORTAL_RESYNC_SECONDS", 30)
# The most of a worker process the resync's housekeeping (lists of Clusters and bindings, the
# cleanup) may take: a task that took d seconds is not queued again for d * (1 / share - 1).
PORTAL_HOUSEKEEPING_SHARE = envfloat("PORTAL_HOUSEKEEPING_SHARE", 0.05)
# Leader election of the watcher and beat (portal/leader.py), client-go's defaults: a standby
# takes over a lease not renewed for PORTAL_LEADER_LEASE_SECONDS; a leader that could not
# renew for PORTAL_LEADER_RENEW_DEADLINE_SECONDS stops leading (before anyone may take over);
# every candidate tries every PORTAL_LEADER_RETRY_SECONDS.
PORTAL_LEADER_LEASE_SECONDS = envfloat("PORTAL_LEADER_LEASE_SECONDS", 10.0)
PORTAL_LEADER_RENEW_DEADLINE_SECONDS = envfloat("PORTAL_LEADER_RENEW_DEADLINE_SECONDS", 7.0)
PORTAL_LEADER_RETRY_SECONDS = envfloat("PORTAL_LEADER_RETRY_SECONDS", 2.0)
# A site's artifact store holds the outputs of runs placed there: removing or moving it is
# refused (without "force") while one of them is active or finished less than this long ago.
PORTAL_RECENT_RUN_HOURS = envint("PORTAL_RECENT_RUN_HOURS", 24)
# A finished step workflow (its outcome and outputs recorded) is deleted on karmada-apiserver
# this long after it ended (at the next resync): a member that deletes its copy would otherwise
# get it re-created from Karmada's Work and run the step again. Raise it to debug a step.
PORTAL_KEEP_FINISHED_SECONDS = envint("PORTAL_KEEP_FINISHED_SECONDS", 60)
# Before deleting a finished step workflow the portal keeps each pod's main-container log in
# PostgreSQL, at most this many bytes of its end per container (the log views serve it from
# there afterwards; a longer log says how much of its front was dropped).
PORTAL_KEPT_LOG_MAX_BYTES = envint("PORTAL_KEPT_LOG_MAX_BYTES", 10 * 1024 * 1024)
# A site that cannot give a finished step's logs holds back the deletion of its step workflow
# (the cleanup tries again) for at most this long after the step ended; then the step workflow
# is deleted anyway and the kept record says why its log is missing.
PORTAL_LOG_KEEP_GIVE_UP_SECONDS = envint("PORTAL_LOG_KEEP_GIVE_UP_SECONDS", 3600)
# A run with work left and nothing moving for this long is advanced again by the resync.
PORTAL_STALE_SECONDS = envint("PORTAL_STALE_SECONDS", 20)
PORTAL_WEBHOOK_URL = env("PORTAL_WEBHOOK_URL", "http://127.0.0.1:8000/webhooks/placement/")
PORTAL_WEBHOOK_TOKEN = env("PORTAL_WEBHOOK_TOKEN", "")
# The portal keeps its MutatingWebhookConfiguration on karmada-apiserver in step itself; turn
# off when the platform team applies it from deploy/ (with its caBundle) instead.
PORTAL_WEBHOOK_REGISTER = envbool("PORTAL_WEBHOOK_REGISTER", True)
# A rule revision needs a second operator's approval before it is applied (off in the demo).
PORTAL_RULES_REVIEW = envbool("PORTAL_RULES_REVIEW", True)
PORTAL_WEBHOOK_BUDGET_MS = envint("PORTAL_WEBHOOK_BUDGET_MS", 500)
PORTAL_WEBHOOK_CA_BUNDLE = env("PORTAL_WEBHOOK_CA_BUNDLE", "")
# Where the webhook queues its decisions for the watcher to record (a Redis list), so the
# admission itself writes nothing to PostgreSQL. Empty: recorded synchronously.
PORTAL_DECISION_QUEUE_URL = env("PORTAL_DECISION_QUEUE_URL", REDIS_URL)
PORTAL_DECISION_QUEUE_KEY = env("PORTAL_DECISION_QUEUE_KEY", "portal:webhook-decisions")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    # The webhook's token is a path segment: no log line of ours or Django's carries it.
    "filters": {"redact_webhook_token": {"()": "portal.logredact.RedactWebhookToken"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["redact_webhook_token"],
        },
        # As Django's default for runserver's request lines, with the filter.
        "django.server": {
            "class": "logging.StreamHandler",
            "formatter": "django.server",
            "filters": ["redact_webhook_token"],
        },
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Records logged to these (4xx/5xx with the path; runserver's request lines) are
        # redacted where they are made, before any handler Django attached sees them.
        "django.request": {"filters": ["redact_webhook_token"]},
        "django.security": {"filters": ["redact_webhook_token"]},
        "django.server": {
            "handlers": ["django.server"],
            "level": "INFO",
            "propagate": False,
            "filters": ["redact_webhook_token"],
        },
    },
}

CELERY_BEAT_SCHEDULE = {
    "portal-resync": {"task": "portal.tasks.resync", "schedule": float(PORTAL_RESYNC_SECONDS)},
}
