"""The portal's settings with one addition for the benchmarks: a no-op POST view mounted
beside every real URL, so the floor is served by the same server, middleware and settings."""

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "tests.bench.noop_urls"
