import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
from portal.startup import require_secret_key

require_secret_key()  # gunicorn's worker exits with the message instead of serving
application = get_wsgi_application()

# Start compiling the workflow schema validator now, not on the first submission.
from placement.parser.schema import fast_validator  # noqa: E402

fast_validator("Workflow")

# And load what a submission enqueues with (the tasks, the controller, the kubernetes
# client: about half a second), so that the first submission a process serves does not pay it.
import portal.tasks  # noqa: E402, F401

# Every import done: the collector runs seldom from now on, and leaves what was loaded out.
from placement.gcpause import collect_seldom  # noqa: E402

collect_seldom()
