"""Steps that really run (`python -m sandbox --execute`): exit codes, results, output files,
retries, deadlines, env, daemons, artifacts, logs, isolation."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.fleet import DEMO_FLEET
from tests.fixtures_sandbox import ARGO_EXAMPLES, SandboxServer, start_sandbox
from tests.sandbox.execution.conftest import Member, needs_bwrap, secret

pytestmark = needs_bwrap


def wf(*templates: dict[str, Any], entry: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "exec-"},
        "spec": {"entrypoint": entry or templates[0]["name"], "templates": list(templates), **spec},
    }


def sh(name: str, script: str, image: str = "alpine:3.23", **extra: Any) -> dict[str, Any]:
    return {"name": name, "container": {"image": image, "command": ["sh", "-c", script]}, **extra}


def steps(name: str, *groups: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "steps": [list(g) for g in groups], **extra}


def test_exit_code_fails_the_node_as_argo_words_it(site_b: Member) -> None:
    status = site_b.wait(site_b.create(wf(sh("main", "echo out; echo err >&2; exit 3"))))
    assert status["phase"] == "Failed"
    (node,) = site_b.pods(status).values()
    assert node["message"] == "Error (exit code 3)"
    assert node["outputs"]["exitCode"] == "3"
    assert node["outputs"]["result"] == "out"


def test_result_and_output_parameter_files(site_b: Member) -> None:
    gen = sh("gen", "echo -n hello > /tmp/p.txt; echo printed")
    gen["outputs"] = {
        "parameters": [
            {"name": "p", "valueFrom": {"path": "/tmp/p.txt"}},
            {"name": "missing", "valueFrom": {"path": "/tmp/none", "default": "dflt"}},
        ]
    }
    use = sh("use", "echo got {{inputs.parameters.v}}")
    use["inputs"] = {"parameters": [{"name": "v"}]}
    main = steps(
        "main",
        [{"name": "gen", "template": "gen"}],
        [
            {
                "name": "use",
                "template": "use",
                "arguments": {
                    "parameters": [
                        {
                            "name": "v",
                            "value": "{{steps.gen.outputs.parameters.p}}-"
                            "{{steps.gen.outputs.parameters.missing}}-"
                            "{{steps.gen.outputs.result}}",
                        }
                    ]
                },
            }
        ],
    )
    status = site_b.wait(site_b.create(wf(main, gen, use)))
    assert status["phase"] == "Succeeded", status.get("message")
    pods = site_b.pods(status)
    assert pods["use"]["outputs"]["result"] == "got hello-dflt-printed"


def test_missing_output_file_without_default_fails_the_node(site_b: Member) -> None:
    t = sh("main", "true")
    t["outputs"] = {"parameters": [{"name": "p", "valueFrom": {"path": "/tmp/nothing"}}]}
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] in ("Failed", "Error")
    (node,) = site_b.pods(status).values()
    assert "/tmp/nothing" in node["message"]


def test_retry_strategy_retries_real_failures(site_b: Member) -> None:
    # Fails on the first two attempts, by what it leaves in a shared volume.
    t = sh(
        "main",
        "n=$(cat /data/n 2>/dev/null || echo 0); echo $((n+1)) > /data/n; [ $n -ge 2 ]",
        retryStrategy={"limit": "3"},
    )
    t["container"]["volumeMounts"] = [{"name": "work", "mountPath": "/data"}]
    body = wf(
        t,
        volumeClaimTemplates=[
            {"metadata": {"name": "work"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        ],
    )
    status = site_b.wait(site_b.create(body))
    assert status["phase"] == "Succeeded", status.get("message")
    attempts = sorted(n["displayName"] for n in site_b.pods(status).values())
    assert len(attempts) == 3
    phases = [site_b.pods(status)[a]["phase"] for a in attempts]
    assert phases == ["Failed", "Failed", "Succeeded"]


def test_active_deadline_kills_the_step(site_b: Member) -> None:
    t = sh("main", "sleep 3600", activeDeadlineSeconds=5)
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Failed"
    (node,) = site_b.pods(status).values()
    assert node["message"] == "Step exceeded its deadline"


def test_script_runs_through_its_interpreter(site_b: Member) -> None:
    t = {
        "name": "main",
        "script": {"image": "python:3", "command": ["python"], "source": "print(6 * 7)"},
    }
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "42"


def test_unmapped_image_is_simulated_and_says_so(site_b: Member) -> None:
    t = {"name": "main", "container": {"image": "example.com/unknown:1", "command": ["x"]}}
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Succeeded"
    (node,) = site_b.pods(status).values()
    assert node["message"] == (
        "simulated: image example.com/unknown:1 not executable here, assumed to succeed"
    )


def test_env_from_secret_and_missing_secret(site_b: Member) -> None:
    site_b.put(secret("creds", token="s3cret"))
    t = sh("main", 'echo "$TOKEN $PLAIN"')
    t["container"]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "PLAIN", "value": "plain"},
    ]
    status = site_b.wait(site_b.create(wf(t)))
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "s3cret plain"
    t["container"]["env"][0]["valueFrom"]["secretKeyRef"]["name"] = "nope"
    name = site_b.create(wf(t))
    node = site_b.server.wait_for(
        lambda: next(iter(site_b.pods(site_b.status(name)).values()), {}).get("message"),
        what="the pod's pending reason",
    )
    assert node == 'CreateContainerConfigError: secret "nope" not found'
    assert site_b.status(name)["phase"] == "Running"


def test_unresolved_variable_is_refused(site_b: Member) -> None:
    t = sh("main", "echo {{inputs.parameters.nope}}")
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Failed"
    assert status["message"] == (
        "invalid spec: templates.main: failed to resolve {{inputs.parameters.nope}}"
    )


def test_pod_logs_are_kept_and_tailed(site_b: Member, executing: SandboxServer) -> None:
    status = site_b.wait(site_b.create(wf(sh("main", "for i in 1 2 3; do echo line$i; done"))))
    (node,) = site_b.pods(status).values()
    assert site_b.log(node["id"]) == "line1\nline2\nline3\n"
    assert site_b.log(node["id"], tailLines=1) == "line3\n"
    with pytest.raises(Exception, match="404"):
        site_b.log("no-such-pod")


def test_daemon_is_reachable_at_its_ip_and_stopped_with_its_scope(site_b: Member) -> None:
    server = {
        "name": "server",
        "daemon": True,
        "script": {
            "image": "python:3",
            "command": ["python"],
            "source": "import http.server as h\n"
            "class H(h.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.end_headers(); self.wfile.write(b'pong')\n"
            "h.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n",
        },
    }
    client = {
        "name": "client",
        "inputs": {"parameters": [{"name": "ip"}]},
        "script": {
            "image": "python:3",
            "command": ["python"],
            # select() waits real time: time.sleep follows the sandbox's time scale, and the
            # server's interpreter takes real time to start.
            "source": "import select, urllib.request\n"
            "for _ in range(200):\n"
            "    try:\n"
            "        print(urllib.request.urlopen('http://{{inputs.parameters.ip}}:8080').read()"
            ".decode()); break\n"
            "    except OSError: select.select([], [], [], 0.05)\n",
        },
    }
    main = steps(
        "main",
        [{"name": "server", "template": "server"}],
        [
            {
                "name": "client",
                "template": "client",
                "arguments": {"parameters": [{"name": "ip", "value": "{{steps.server.ip}}"}]},
            }
        ],
    )
    status = site_b.wait(site_b.create(wf(main, server, client)))
    assert status["phase"] == "Succeeded", status.get("message")
    pods = site_b.pods(status)
    assert pods["client"]["outputs"]["result"] == "pong"
    assert pods["server"]["podIP"] == "127.0.0.1"
    assert pods["server"]["phase"] == "Succeeded"


def test_artifacts_key_only_within_a_site(site_b: Member) -> None:
    gen = sh("gen", "mkdir -p /out && echo data > /out/f.txt")
    gen["outputs"] = {"artifacts": [{"name": "a", "path": "/out/f.txt"}]}
    use = sh("use", "cat /in/f.txt")
    use["inputs"] = {"artifacts": [{"name": "a", "path": "/in/f.txt"}]}
    main = steps(
        "main",
        [{"name": "gen", "template": "gen"}],
        [
            {
                "name": "use",
                "template": "use",
                "arguments": {
                    "artifacts": [{"name": "a", "from": "{{steps.gen.outputs.artifacts.a}}"}]
                },
            }
        ],
    )
    status = site_b.wait(site_b.create(wf(main, gen, use)))
    assert status["phase"] == "Succeeded", status.get("message")
    pods = site_b.pods(status)
    (art,) = pods["gen"]["outputs"]["artifacts"]
    assert set(art) == {"name", "path", "s3"}
    assert set(art["s3"]) == {"key"}
    assert art["s3"]["key"].endswith("/a.tgz")
    assert pods["use"]["outputs"]["result"] == "data"


def _reader(key: str, endpoint: str, bucket: str) -> dict[str, Any]:
    t = sh("main", "cat /in/f.txt")
    t["inputs"] = {
        "artifacts": [
            {
                "name": "a",
                "path": "/in/f.txt",
                "s3": {"endpoint": endpoint, "bucket": bucket, "key": key},
            }
        ]
    }
    return wf(t)


def test_artifacts_across_sites_only_where_reachable(
    site_a: Member,
    site_b: Member,
    site_c: Member,
) -> None:
    gen = sh("main", "echo from-b > /tmp/f.txt")
    gen["outputs"] = {"artifacts": [{"name": "a", "path": "/tmp/f.txt"}]}
    status = site_b.wait(site_b.create(wf(gen)))
    (node,) = site_b.pods(status).values()
    key = node["outputs"]["artifacts"][0]["s3"]["key"]
    reader = _reader(key, "s3.site-b.sandbox.invalid", "site-b-artifacts")
    # site-a may read site-b's bucket (demo fleet), but only with the credential Secret: the
    # location names it, it is a volume of the pod, and without it the pod waits (Pending).
    s3 = reader["spec"]["templates"][0]["inputs"]["artifacts"][0]["s3"]
    s3["accessKeySecret"] = {"name": "site-b-artifacts-credentials", "key": "accessKey"}
    name = site_a.create(reader)

    def pending() -> str | None:
        nodes = (site_a.status(name).get("nodes") or {}).values()
        return next(
            (
                n["message"]
                for n in nodes
                if n["type"] == "Pod" and n["phase"] == "Pending" and "message" in n
            ),
            None,
        )

    message = site_a.server.wait_for(pending, what="the reader's pod to wait for its Secret")
    assert message == (
        'MountVolume.SetUp failed for volume "site-b-artifacts-credentials" : '
        'secret "site-b-artifacts-credentials" not found'
    )
    # The repository's keys are those of its site's Secret on its own member (site-b); the
    # reader signs with the copy in its own namespace.
    site_b.put(secret("site-b-artifacts-credentials", accessKey="a", secretKey="b"))
    site_a.put(secret("site-b-artifacts-credentials", accessKey="a", secretKey="b"))
    status = site_a.wait(name)
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_a.pods(status).values()
    assert node["outputs"]["result"] == "from-b"
    # site-c may not read site-a's bucket at all (demo fleet).
    status = site_c.wait(site_c.create(_reader("x/y.tgz", "s3.site-a.sandbox.invalid", "")))
    assert status["phase"] == "Error"
    (node,) = site_c.pods(status).values()
    assert "no such host" in node["message"]
    # A key that is not there.
    status = site_b.wait(site_b.create(_reader("no/such.tgz", "", "")))
    (node,) = site_b.pods(status).values()
    assert "NoSuchKey" in node["message"]


def test_isolation_no_network_and_no_writes_outside(
    site_b: Member,
    executing: SandboxServer,
) -> None:
    port = executing.url.rsplit(":", 1)[1]
    script = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f'{port}), 2)" 2>/dev/null && echo NET-OPEN; '
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\" "
        "2>/dev/null && echo NET-OPEN; "
        "touch /usr/x 2>/dev/null && echo WROTE-USR; "
        "touch /etc/x 2>/dev/null && echo WROTE-ETC; "
        f"ls {executing.data_dir} 2>/dev/null && echo SEES-DATA; "  # type: ignore[attr-defined]
        "echo done > /tmp/ok && cat /tmp/ok"
    )
    status = site_b.wait(site_b.create(wf(sh("main", script))))
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "done"
    # Another site's step cannot reach site-b's daemons either: each Workflow has its own
    # network namespace, so nothing outside it answers.


def test_large_node_status_is_compressed(tmp_path: Path) -> None:
    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    fleet["execution"]["maxNodeStatusBytes"] = 2000
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    data = Path(tempfile.mkdtemp(prefix="sandbox-test-data-"))
    data.chmod(0o755)
    server = start_sandbox(
        tmp_path,
        extra_args=["--execute", "--data-dir", str(data), "--fleet", str(tmp_path / "fleet.yaml")],
    )
    try:
        member = Member(server, "site-b", data)
        loop = sh("echo", "echo {{item}}")
        main = steps("main", [{"name": "e", "template": "echo", "withSequence": {"count": "20"}}])
        name = member.create(wf(main, loop))
        status = member.wait(name)
        assert status["phase"] == "Succeeded"
        assert "nodes" not in status
        nodes = json.loads(gzip.decompress(base64.b64decode(status["compressedNodes"])))
        assert sum(1 for n in nodes.values() if n["type"] == "Pod") == 20
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def test_retry_expression_stops_retries(site_b: Member) -> None:
    t = sh(
        "main",
        "exit 3",
        retryStrategy={"limit": "3", "expression": "asInt(lastRetry.exitCode) == 2"},
    )
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Failed"
    assert len(site_b.pods(status)) == 1


def test_workflow_deadline_stops_running_steps(site_b: Member) -> None:
    status = site_b.wait(site_b.create(wf(sh("main", "sleep 3600"), activeDeadlineSeconds=1)))
    assert status["phase"] == "Failed"
    (node,) = site_b.pods(status).values()
    assert node["phase"] == "Failed"
    assert node["message"] == "Step exceeded its deadline"


def test_artifact_repository_ref_from_the_members_configmap(site_b: Member) -> None:
    example = yaml.safe_load((ARGO_EXAMPLES / "artifact-repository-ref.yaml").read_text())
    # Its own ConfigMap name, so that the example run elsewhere still finds none.
    example["spec"]["artifactRepositoryRef"]["configMap"] = "team-repositories"
    repo = "s3:\n  bucket: team-bucket\n  endpoint: s3.site-b.sandbox.invalid\n"
    site_b.create_bucket("team-bucket")  # S3 has no bucket that nobody made
    site_b.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "team-repositories"},
            "data": {"my-key": repo},
        }
    )
    status = site_b.wait(site_b.create(example))
    assert status["phase"] == "Succeeded", status.get("message")
    assert status["artifactRepositoryRef"]["configMap"] == "team-repositories"
    assert status["artifactRepositoryRef"]["key"] == "my-key"
    (node,) = site_b.pods(status).values()
    key = node["outputs"]["artifacts"][0]["s3"]["key"]
    assert (site_b.data_dir / "buckets" / "team-bucket" / key).is_file()
