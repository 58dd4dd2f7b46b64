"""The executing sandbox as a security boundary: what a step reaches and what it cannot
(sandbox/README.md, "What a step can reach"). Each test is a reproducer of a way out: host
folders mounted through a claim's name or a sub-path, links in artifacts and buckets, and
the rest of the review (http inputs: test_http_inputs.py)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_sandbox import SandboxServer
from tests.sandbox.execution.conftest import Member, dumps, needs_bwrap
from tests.sandbox.execution.test_execution import sh, steps, wf

pytestmark = needs_bwrap

SECRET = "TOP-SECRET-CANARY"
CLAIM = {"metadata": {"name": "work"}, "spec": {"accessModes": ["ReadWriteOnce"]}}


@pytest.fixture
def canary() -> Iterator[Path]:
    """A root-only folder with a root-only file, as the host's secrets are."""
    d = Path(tempfile.mkdtemp(prefix="canary-"))
    (d / "secret.txt").write_text(SECRET + "\n")
    (d / "secret.txt").chmod(0o600)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def untouched(d: Path) -> None:
    """Nothing was chowned, opened up, planted or removed there."""
    st = d.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700)
    assert sorted(os.listdir(d)) == ["secret.txt"]
    st = (d / "secret.txt").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
    assert (d / "secret.txt").read_text() == SECRET + "\n"


def mounting(name: str, script: str, sub_path: str | None = None, **extra: Any) -> dict[str, Any]:
    t = sh(name, script, **extra)
    mount: dict[str, Any] = {"name": "work", "mountPath": "/mnt/vol"}
    if sub_path is not None:
        mount["subPath"] = sub_path
    t["container"]["volumeMounts"] = [mount]
    return t


def only_pod(member: Member, status: dict[str, Any]) -> dict[str, Any]:
    (node,) = member.pods(status).values()
    return node


# -- host folders through a claim's name or a sub-path ------------------------------------------


def test_sub_paths_that_go_up_or_are_absolute_are_refused_as_kube_apiserver_does(
    site_b: Member, canary: Path
) -> None:
    up = "../" * 12 + str(canary).lstrip("/")
    status = site_b.wait(
        site_b.create(
            wf(mounting("main", "cat /mnt/vol/secret.txt", up), volumeClaimTemplates=[CLAIM])
        )
    )
    node = only_pod(site_b, status)
    assert status["phase"] == "Error", dumps(status)
    assert node["message"] == (
        f'Pod "{node["id"]}" is invalid: spec.containers[1].volumeMounts[0].subPath: '
        f"Invalid value: \"{up}\": must not contain '..'"
    )
    status = site_b.wait(
        site_b.create(
            wf(
                mounting("main", "cat /mnt/vol/secret.txt", str(canary)),
                volumeClaimTemplates=[CLAIM],
            )
        )
    )
    node = only_pod(site_b, status)
    assert node["message"].endswith(
        f'subPath: Invalid value: "{canary}": must be a relative path'
    ), node["message"]
    assert SECRET not in dumps(status)
    untouched(canary)


def test_a_claim_template_whose_name_is_a_path_is_refused_as_argo_and_kube_apiserver_do(
    site_b: Member, canary: Path
) -> None:
    bad = {"metadata": {"name": "../" * 12 + str(canary).lstrip("/")}}
    body = wf(mounting("main", "cat /mnt/vol/secret.txt"), volumeClaimTemplates=[bad])
    body["spec"]["templates"][0]["container"]["volumeMounts"][0]["name"] = bad["metadata"]["name"]
    name = site_b.create(body)
    status = site_b.wait(name)
    assert status["phase"] == "Error"
    pvc = f"{name}-{bad['metadata']['name']}"
    assert status["message"].startswith(
        f'pvc create error: PersistentVolumeClaim "{pvc}" is invalid: metadata.name: '
        f'Invalid value: "{pvc}": a lowercase RFC 1123 subdomain must consist of'
    ), status["message"]
    assert not site_b.pods(status)
    untouched(canary)


def test_a_sub_path_through_a_link_is_followed_only_inside_its_volume(
    site_b: Member, canary: Path
) -> None:
    prepare = mounting(
        "prepare",
        "mkdir -p /mnt/vol/real && echo inside > /mnt/vol/real/f && ln -s real /mnt/vol/alias"
        f" && ln -s {canary} /mnt/vol/out && ln -s / /mnt/vol/root",
    )
    inside = mounting("inside", "cat /mnt/vol/f", "alias")
    escape = mounting("escape", "cat /mnt/vol/secret.txt; ls /mnt/vol", "out")
    main = steps(
        "main",
        [{"name": "prepare", "template": "prepare"}],
        [{"name": "inside", "template": "inside"}],
        [{"name": "escape", "template": "escape"}],
    )
    # The escaping pod waits, as the kubelet keeps it; the deadline (5 real seconds at the
    # tests' time scale) ends the Workflow.
    name = site_b.create(
        wf(main, prepare, inside, escape, volumeClaimTemplates=[CLAIM], activeDeadlineSeconds=5000)
    )

    def waiting() -> str | None:
        pods = site_b.pods(site_b.status(name)) if site_b.status(name).get("nodes") else {}
        return (pods.get("escape") or {}).get("message")

    message = site_b.server.wait_for(waiting, what="the escaping pod's reason")
    assert message == (
        'CreateContainerConfigError: failed to prepare subPath for volumeMount "work" of '
        'container "main"'
    )
    status = site_b.wait(name)
    pods = site_b.pods(status)
    assert pods["inside"]["outputs"]["result"] == "inside"
    assert pods["escape"]["phase"] != "Succeeded"
    assert SECRET not in dumps(status)
    untouched(canary)
    # Nor was "/" given away (the link to it was a sub-path too).
    assert Path("/usr").stat().st_uid == 0


def test_a_host_path_volume_is_an_empty_folder_here(site_b: Member, canary: Path) -> None:
    t = sh("main", "ls -A /h; cat /h/secret.txt 2>/dev/null; echo end")
    t["container"]["volumeMounts"] = [{"name": "h", "mountPath": "/h"}]
    body = wf(t, volumes=[{"name": "h", "hostPath": {"path": str(canary)}}])
    status = site_b.wait(site_b.create(body))
    assert only_pod(site_b, status)["outputs"]["result"] == "end"
    untouched(canary)


# -- links in artifacts and buckets -----------------------------------------------------------


def test_artifacts_keep_only_the_links_that_stay_inside_them(site_b: Member, canary: Path) -> None:
    gen = sh(
        "gen",
        "mkdir -p /out/d/sub && echo hi > /out/d/sub/f && ln -s sub/f /out/d/inside"
        f" && ln -s {canary}/secret.txt /out/d/secret && ln -s / /out/d/root"
        " && ln -s ../../etc/passwd /out/d/up",
    )
    gen["outputs"] = {
        "artifacts": [
            {"name": "plain", "path": "/out/d", "archive": {"none": {}}},
            {"name": "tgz", "path": "/out/d"},
        ]
    }
    use = sh(
        "use",
        "for d in /in/plain /in/tgz; do cat $d/inside; ls $d | tr '\\n' ' '; echo; done;"
        " cat /in/plain/secret /in/tgz/secret 2>/dev/null; true",
    )
    use["inputs"] = {
        "artifacts": [{"name": "plain", "path": "/in/plain"}, {"name": "tgz", "path": "/in/tgz"}]
    }
    args = [
        {"name": n, "from": f"{{{{steps.gen.outputs.artifacts.{n}}}}}"} for n in ("plain", "tgz")
    ]
    main = steps(
        "main",
        [{"name": "gen", "template": "gen"}],
        [{"name": "use", "template": "use", "arguments": {"artifacts": args}}],
    )
    status = site_b.wait(site_b.create(wf(main, gen, use)))
    assert status["phase"] == "Succeeded", dumps(status)
    pods = site_b.pods(status)
    assert pods["use"]["outputs"]["result"].splitlines() == [
        "hi",
        "inside sub ",
        "hi",
        "inside sub ",
    ]
    plain = next(a for a in pods["gen"]["outputs"]["artifacts"] if a["name"] == "plain")
    stored = site_b.data_dir / "buckets" / "site-b-artifacts" / plain["s3"]["key"]
    assert sorted(os.listdir(stored)) == ["inside", "sub"]
    # S3 keeps no links: with `archive: none` a link that stays inside is stored as the file
    # it points at (one object per file, as Argo's PutDirectory uploads it).
    assert not (stored / "inside").is_symlink()
    assert (stored / "inside").read_text() == "hi\n"
    assert SECRET not in dumps(status)
    untouched(canary)


@pytest.fixture
def planted(site_b: Member, canary: Path) -> Iterator[Path]:
    """Links in site-b's bucket to the root-only folder and file (as a bucket written before
    links were kept out would hold)."""
    bucket = site_b.data_dir / "buckets" / "site-b-artifacts"
    bucket.mkdir(parents=True, exist_ok=True)
    links = [bucket / "planted-dir", bucket / "planted-file"]
    links[0].symlink_to(canary)
    links[1].symlink_to(canary / "secret.txt")
    try:
        yield bucket
    finally:
        for link in links:
            link.unlink()


def _s3_reader(key: str) -> dict[str, Any]:
    t = sh("main", "cat /in/x")
    t["inputs"] = {"artifacts": [{"name": "x", "path": "/in/x", "s3": {"key": key}}]}
    return wf(t)


def test_repository_reads_and_writes_resolve_inside_the_bucket_or_fail(
    site_b: Member, canary: Path, planted: Path
) -> None:
    # Another site's bucket by a key that goes up: `..` stays at the bucket's top.
    other = "../site-a-artifacts/sentinel2/l1c/T31UDQ/S2B_MSIL1C_20240612T105619.SAFE/manifest.safe"
    assert (planted / other).is_file()
    keys = (
        "planted-file",
        "planted-dir/secret.txt",
        "planted-dir",
        "../" * 8 + "etc/passwd",
        other,
    )
    for key in keys:
        status = site_b.wait(site_b.create(_s3_reader(key)))
        assert status["phase"] == "Error", key
        assert "The specified key does not exist. (NoSuchKey)" in status["message"], key
        assert SECRET not in dumps(status)
    writer = sh("main", "echo planted > /tmp/f")
    writer["outputs"] = {
        "artifacts": [{"name": "f", "path": "/tmp/f", "s3": {"key": "planted-dir/new.txt"}}]
    }
    status = site_b.wait(site_b.create(wf(writer)))
    assert status["phase"] == "Error"
    assert only_pod(site_b, status)["message"].startswith("failed to save outputs: /tmp/f: ")
    untouched(canary)


def test_another_sites_bucket_as_a_repository_needs_its_keys_and_a_bucket_name(
    site_b: Member,
) -> None:
    def repository(name: str, bucket: str) -> str:
        site_b.put(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"repo": f"s3:\n  bucket: {bucket}\n"},
            }
        )
        body = wf(sh("main", "echo x > /tmp/f"))
        body["spec"]["artifactRepositoryRef"] = {"configMap": name, "key": "repo"}
        body["spec"]["templates"][0]["outputs"] = {"artifacts": [{"name": "f", "path": "/tmp/f"}]}
        return str(site_b.wait(site_b.create(body)).get("message"))

    # site-b may read site-a's bucket (demo fleet), but writing there takes site-a's keys: a
    # repository config naming no Secret is signed with site-b's node identity (Argo's
    # executor takes the environment's credentials), which site-a's repository refuses.
    assert repository("to-site-a", "site-a-artifacts") == (
        "failed to save outputs: /tmp/f: The AWS Access Key Id you provided does not exist "
        "in our records. (InvalidAccessKeyId)"
    )
    # A bucket is a folder here: a name that is no bucket name never becomes a path.
    assert repository("to-a-path", "../pods") == (
        "failed to resolve artifact repository: bucket '../pods': InvalidBucketName: "
        "The specified bucket is not valid."
    )


def test_inputs_and_outputs_never_follow_a_link_out_of_the_pods_folders(
    site_b: Member, canary: Path
) -> None:
    prepare = mounting("prepare", f"ln -s {canary} /mnt/vol/in")
    load = mounting("load", "true")
    load["inputs"] = {
        "artifacts": [{"name": "x", "path": "/mnt/vol/in/planted.txt", "raw": {"data": "x"}}]
    }
    main = steps(
        "main",
        [{"name": "prepare", "template": "prepare"}],
        [{"name": "load", "template": "load"}],
    )
    status = site_b.wait(site_b.create(wf(main, prepare, load, volumeClaimTemplates=[CLAIM])))
    assert site_b.pods(status)["load"]["phase"] == "Error"
    message = site_b.pods(status)["load"]["message"]
    assert message.startswith("failed to load artifact x: open /mnt/vol/in/planted.txt: "), message
    untouched(canary)

    leak = sh("main", f"ln -s {canary}/secret.txt /tmp/p && ln -s {canary} /tmp/d")
    leak["outputs"] = {
        "parameters": [{"name": "p", "valueFrom": {"path": "/tmp/p"}}],
        "artifacts": [{"name": "d", "path": "/tmp/d", "archive": {"none": {}}}],
    }
    status = site_b.wait(site_b.create(wf(leak)))
    assert status["phase"] == "Error", dumps(status)
    assert "open /tmp/p: no such file or directory" in only_pod(site_b, status)["message"]
    assert SECRET not in dumps(status)
    assert not list((site_b.data_dir / "buckets" / "site-b-artifacts").rglob("secret.txt"))
    untouched(canary)


CONNECT = 'python3 -c "import socket; socket.create_connection('


def test_what_a_step_cannot_reach(site_b: Member, executing: SandboxServer, canary: Path) -> None:
    # Another pod, running: its files and its processes.
    neighbour = site_b.create(wf(sh("main", "echo neighbour-secret > /tmp/mine; sleep 20000")))

    def neighbour_pid() -> int | None:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if b"neighbour-secret" in (proc / "cmdline").read_bytes():
                    return int(proc.name)
            except OSError:
                continue
        return None

    other_pid = site_b.server.wait_for(neighbour_pid, what="the neighbour pod to run")
    port = executing.url.rsplit(":", 1)[1]
    fd, world = tempfile.mkstemp(prefix="world-readable-")  # in the host's /tmp, mode 644
    os.close(fd)
    os.chmod(world, 0o644)
    data = executing.data_dir  # type: ignore[attr-defined]
    sandbox_pid = executing.process.pid
    probes = {
        # files: the host's root-only files, the sandbox's folders (pods, buckets, kubeconfig)
        "shadow": "cat /etc/shadow",
        "canary": f"cat {canary}/secret.txt",
        "data-dir": f"ls {data}",
        "buckets": f"ls {data}/buckets/site-a-artifacts",
        "kubeconfig": f"cat {executing.kubeconfig}",
        "host-tmp": f"cat {world}",
        "write-usr": "touch /usr/x",
        "write-etc": "touch /etc/x",
        # network: the sandbox's API on the host's loopback, anything beyond
        "sandbox-api": f"{CONNECT}('127.0.0.1', {port}), 2)\"",
        "internet": f"{CONNECT}('1.1.1.1', 53), 2)\"",
        # other pods: a running pod's processes and files, any pod's folder
        "neighbour-pid": f"kill -0 {other_pid}",
        "neighbour-files": f"cat /proc/{other_pid}/root/tmp/mine",
        "neighbour-tmp": "cat /tmp/mine",
        "pods-folders": f"ls {data}/pods",
        # processes: the sandbox's, or any beyond the pod's own
        "sandbox-pid": f"kill -0 {sandbox_pid}",
        "host-procs": "[ $(ls -d /proc/[0-9]* | wc -l) -gt 10 ]",
        # credentials: the sandbox's environment
        "sandbox-env": "env | grep -E 'DATABASE_URL|REDIS_URL|KARMADA|SECRET'",
    }
    script = "; ".join(f"{cmd} >/dev/null 2>&1 && echo REACHED:{k}" for k, cmd in probes.items())
    status = site_b.wait(site_b.create(wf(sh("main", script + "; echo done"))))
    os.unlink(world)
    node = only_pod(site_b, status)
    assert node["outputs"]["result"] == "done", node["outputs"]["result"]
    untouched(canary)
    # It was running all along (20 real seconds at the tests' time scale): the probes met it.
    assert site_b.status(neighbour)["phase"] == "Running"
    assert neighbour_pid() == other_pid
