"""The executing sandbox as a security boundary for http inputs: they are fetched from the
pod's own network namespace, never from the host's loopback (sandbox/README.md, "What a step
can reach")."""

from __future__ import annotations

from typing import Any

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.execution.conftest import Member, dumps, needs_bwrap
from tests.sandbox.execution.test_execution import sh, steps, wf

pytestmark = needs_bwrap


SERVER = {
    "name": "server",
    "daemon": True,
    "script": {
        "image": "python:3",
        "command": ["python"],
        # Argo appends the source's path after `args` (operator.go), so the target comes in
        # through the source.
        "source": "import http.server as h\n"
        "class H(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        if self.path == '/data':\n"
        "            self.send_response(200); self.end_headers(); self.wfile.write(b'served')\n"
        "        else:\n"
        "            self.send_response(302)\n"
        "            self.send_header('Location', '{{inputs.parameters.target}}')\n"
        "            self.end_headers()\n"
        "h.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n",
    },
    "inputs": {"parameters": [{"name": "target"}]},
}
READY = {
    "name": "ready",
    "inputs": {"parameters": [{"name": "ip"}]},
    "script": {
        "image": "python:3",
        "command": ["python"],
        # select() waits real time: time.sleep follows the sandbox's time scale, and the
        # server's interpreter takes real time to start.
        "source": "import select, urllib.request\n"
        "for _ in range(400):\n"
        "    try:\n"
        "        urllib.request.urlopen('http://{{inputs.parameters.ip}}:8080/data'); break\n"
        "    except OSError: select.select([], [], [], 0.05)\n",
    },
}


def _http_reader(name: str, url: str) -> dict[str, Any]:
    t = sh(name, "cat /in/v")
    t["inputs"] = {"artifacts": [{"name": "v", "path": "/in/v", "http": {"url": url}}]}
    return t


def _served_readers(target: str) -> dict[str, Any]:
    """A daemon serving at its pod IP (and redirecting to `target`), and two steps reading
    an http input from it: its data, and the redirect."""
    ip = "{{steps.server.ip}}"
    main = steps(
        "main",
        [
            {
                "name": "server",
                "template": "server",
                "arguments": {"parameters": [{"name": "target", "value": target}]},
            }
        ],
        [
            {
                "name": "ready",
                "template": "ready",
                "arguments": {"parameters": [{"name": "ip", "value": ip}]},
            }
        ],
        [
            {"name": "data", "template": "data", "continueOn": {"error": True}},
            {"name": "redirect", "template": "redirect", "continueOn": {"error": True}},
        ],
    )
    body = wf(
        main,
        SERVER,
        READY,
        _http_reader("data", f"http://{ip}:8080/data"),
        _http_reader("redirect", f"http://{ip}:8080/elsewhere"),
    )
    # The readers' urls name the server's IP through a step argument Argo would substitute.
    for t in body["spec"]["templates"][-2:]:
        t["inputs"]["parameters"] = [{"name": "ip"}]
        art = t["inputs"]["artifacts"][0]
        art["http"]["url"] = art["http"]["url"].replace(ip, "{{inputs.parameters.ip}}")
    for step in main["steps"][2]:
        step["arguments"] = {"parameters": [{"name": "ip", "value": ip}]}
    return body


def test_http_inputs_are_fetched_from_the_pods_own_network(
    site_b: Member, executing: SandboxServer
) -> None:
    # The sandbox's API (its Secrets) and a local file: neither is reachable.
    for url, reason in (
        (f"{executing.url}/api/v1/secrets", "connect: connection refused"),
        ("file:///etc/passwd", 'unsupported protocol scheme "file"'),
    ):
        status = site_b.wait(site_b.create(wf(_http_reader("main", url))))
        assert status["phase"] == "Error", url
        assert status["message"].startswith(f'Get "{url}": '), status["message"]
        assert status["message"].endswith(reason), status["message"]
        assert "SecretList" not in dumps(status) and "root:" not in dumps(status)
    # A daemon of the Workflow serves at its pod IP; a redirect from it to the sandbox's API
    # is followed in the pod's namespace, where nothing answers.
    body = _served_readers(f"{executing.url}/api/v1/secrets")
    status = site_b.wait(site_b.create(body))
    pods = site_b.pods(status)
    assert pods["data"]["outputs"]["result"] == "served", dumps(status)
    assert pods["redirect"]["phase"] == "Error"
    assert pods["redirect"]["message"].endswith(
        f"dial tcp 127.0.0.1:{executing.url.rsplit(':', 1)[1]}: connect: connection refused"
    ), pods["redirect"]["message"]
    assert "SecretList" not in dumps(status)


# -- the rest of the review: files, network, other pods, buckets, credentials, processes -------
