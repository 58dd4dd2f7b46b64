"""Every shell example of README.md and docs/ runs as written against a live demo stack, or is
marked ``<!-- not run: why -->`` (tests/docs_examples.py says how blocks are read and checked)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests import docs_examples
from tests.factories import api_key
from tests.fixtures_stack import WEBHOOK_TOKEN, Stack, quiet_stacks, stack_for_test, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# What the documents show, as their examples were first run: replaced by this stack's.
DOC_URLS = ("http://127.0.0.1:8765", "http://127.0.0.1:8000")
DOC_SCIENTIST_TOKEN = "6ef1be224e09461f6926e5586ee075d216b28485"
DOC_ADMIN_TOKEN = "d42ee82d0ccca225dd7addf152d90d5be90d7fba"
DOC_KUBECONFIG = "/tmp/issue8/var/kubeconfig"
DOC_WEBHOOK_TOKEN = "docs-webhook-token"


def _script(examples: list[docs_examples.Example], out: Path) -> tuple[str, list[Any]]:
    """One bash script for a document's examples, each command's output in ``out``."""
    parts = ["set +e"]
    commands: list[docs_examples.Command] = []
    for ex in examples:
        if ex.not_run is not None:
            continue
        for command in ex.commands:
            n = len(commands)
            commands.append(command)
            parts.append(
                f"{{\n{command.text}\n}} > {out}/{n}.out 2> {out}/{n}.err < /dev/null\n"
                f"echo $? > {out}/{n}.rc"
            )
    return "\n".join(parts) + "\n", commands


def run_document(path: Path, live: Stack, base_url: str, tmp: Path) -> list[str]:
    """Run a document's examples as they are written; what went wrong, one line each."""
    User = get_user_model()
    substitutions = {
        DOC_SCIENTIST_TOKEN: api_key(User.objects.get(username="scientist")),
        DOC_ADMIN_TOKEN: api_key(User.objects.get(username="admin")),
        DOC_KUBECONFIG: str(live.sandbox.kubeconfig),
        DOC_WEBHOOK_TOKEN: WEBHOOK_TOKEN,
        "<token>": api_key(User.objects.get(username="scientist")),
        **dict.fromkeys(DOC_URLS, base_url),
    }
    out = tmp / "out"
    out.mkdir()
    # A scratch folder that looks like a fresh clone: what the examples write stays here.
    work = tmp / "clone"
    work.mkdir()
    for name in ("examples", "manage.py", ".venv"):
        (work / name).symlink_to(ROOT / name)
    script, commands = _script(docs_examples.examples(path), out)
    for doc, real in substitutions.items():
        script = script.replace(doc, real)
    env = {**live.env, "KARMADA": str(live.sandbox.kubeconfig)}
    done = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, check=False
    )
    failures = [] if done.returncode == 0 else [f"script exited {done.returncode}: {done.stderr}"]
    for n, command in enumerate(commands):
        if not (out / f"{n}.rc").exists():
            failures.append(f"{path.name} line {command.line}: never ran (the script stopped)")
            continue
        rc = int((out / f"{n}.rc").read_text() or "1")
        stdout = (out / f"{n}.out").read_text()
        if rc != 0:
            stdout += (out / f"{n}.err").read_text()
        for failure in docs_examples.expectation_failures(command, rc, stdout):
            failures.append(f"{path.name} {failure}")
    return failures


DEMO_SITES = {"site-a", "site-b", "site-c"}

# Documents with an example to run (the others need no stack).
DOCUMENTS = [
    p.relative_to(ROOT)
    for p in docs_examples.documents(ROOT)
    if any(ex.not_run is None for ex in docs_examples.examples(p))
]


@pytest.fixture
def fresh_demo(stack: Stack, transactional_db: Any, settings: Any) -> Iterator[Stack]:
    """The stack with the demo loaded into empty tables whose ids start at 1, as on a fresh
    demo: the documents' ids (``/datasets/3/``, ``/rules/4/``, ``/runs/1/``) are those. The
    worker and watcher stop first, so that nothing writes between the flush and the load."""
    quiet_stacks(sig=signal.SIGKILL)  # every stack of the session: the others' too
    call_command("flush", interactive=False, verbosity=0)  # TRUNCATE ... RESTART IDENTITY
    with stack_for_test(stack, settings) as s:
        yield s
    _clusters_beyond_the_demo_deleted(stack)


def _clusters_beyond_the_demo_deleted(stack: Stack) -> None:
    """The operator guide joins a site-d to the stack's sandbox: the stack is shared with the
    tests after these, which expect the demo fleet's three sites."""
    from kubernetes import client

    api = client.CustomObjectsApi(stack.sandbox.api_client())
    group = ("cluster.karmada.io", "v1alpha1", "clusters")
    for cluster in api.list_cluster_custom_object(*group)["items"]:
        name = cluster["metadata"]["name"]
        if name not in DEMO_SITES:
            api.delete_cluster_custom_object(*group, name)
    wait_for(
        lambda: {c["metadata"]["name"] for c in api.list_cluster_custom_object(*group)["items"]}
        <= DEMO_SITES,
        60,
        "the clusters the documents added to be gone",
    )


@pytest.mark.parametrize("document", DOCUMENTS, ids=str)
def test_documented_examples_run_as_written(
    document: Path, fresh_demo: Stack, live_server: Any, tmp_path: Path
) -> None:
    failures = run_document(ROOT / document, fresh_demo, live_server.url, tmp_path)
    assert not failures, "\n".join(failures)


def test_a_broken_example_in_a_copy_of_a_guide_fails(
    fresh_demo: Stack, live_server: Any, tmp_path: Path
) -> None:
    guide = (ROOT / "docs" / "api.md").read_text()
    broken = guide.replace(
        '$ curl -s -H "Authorization: Token $S" $P/api/v1/sites/\n',
        '$ curl -s -H "Authorization: Token $S" $P/api/v1/sitez/\n',
        1,
    )
    assert broken != guide, "the sites example this test breaks is no longer in docs/api.md"
    copy = tmp_path / "api.md"
    copy.write_text(broken)
    scratch = tmp_path / "run"
    scratch.mkdir()
    failures = run_document(copy, fresh_demo, live_server.url, scratch)
    assert [f for f in failures if "/api/v1/sitez/" in f] == failures, failures
    assert failures, "the broken command passed"


def test_every_not_run_marker_says_why() -> None:
    for path in docs_examples.documents(ROOT):
        for ex in docs_examples.examples(path):
            assert ex.not_run is None or len(ex.not_run) > 8, f"{path}:{ex.line}"


def test_a_command_with_a_shown_status_is_checked_against_it() -> None:
    command = docs_examples.Command(text="curl ...", line=1, shown=["204"])
    assert docs_examples.expectation_failures(command, 0, "204\n") == []
    assert docs_examples.expectation_failures(command, 0, "404\n")
