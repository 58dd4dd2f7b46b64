import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

# Start compiling the workflow schema validator now, not on the first submission.
from placement.parser import _fast_validator  # noqa: E402

_fast_validator("Workflow")
