"""The executing sandbox's Argo, never kinder and never harsher than Argo: retries as
`processNodeRetries` runs them, variables substituted before an expression is evaluated,
script templates as the executor stages them, deadlines on the simulated clock and the
outcome of a step whose image cannot run here."""

from __future__ import annotations

from typing import Any

from sandbox import simulated
from sandbox.argo.retry import retry_decision, retry_policy
from tests.sandbox.execution.conftest import Member, needs_bwrap
from tests.sandbox.execution.test_execution import sh, steps, wf

WORK = {"metadata": {"name": "work"}, "spec": {"accessModes": ["ReadWriteOnce"]}}


def counting(name: str, fail_times: int, **extra: Any) -> dict[str, Any]:
    """A step failing its first `fail_times` attempts (counted in a shared volume)."""
    t = sh(
        name,
        f"n=$(cat /data/n 2>/dev/null || echo 0); echo $((n+1)) > /data/n; [ $n -ge {fail_times} ]",
        **extra,
    )
    t["container"]["volumeMounts"] = [{"name": "work", "mountPath": "/data"}]
    return t


# workflow/controller/operator.go processNodeRetries: `retryStrategy.Limit != nil && ...`:
# a nil limit never ends the retries.
@needs_bwrap
def test_empty_retry_strategy_retries_without_limit(site_b: Member) -> None:
    body = wf(counting("main", 5, retryStrategy={}), volumeClaimTemplates=[WORK])
    status = site_b.wait(site_b.create(body))
    assert status["phase"] == "Succeeded", status.get("message")
    assert len(site_b.pods(status)) == 6


@needs_bwrap
def test_limit_exhausted_says_no_more_retries_left(site_b: Member) -> None:
    status = site_b.wait(site_b.create(wf(sh("main", "exit 1", retryStrategy={"limit": 1}))))
    assert status["phase"] == "Failed"
    assert len(site_b.pods(status)) == 2
    (retry,) = [n for n in status["nodes"].values() if n["type"] == "Retry"]
    assert retry["message"] == "No more retries left"


# operator.go executeTemplate substitutes the inputs into the template (common.ProcessArgs)
# before processNodeRetries compiles `retryStrategy.expression`.
@needs_bwrap
def test_inputs_are_substituted_into_the_retry_expression_first(site_b: Member) -> None:
    t = sh(
        "main",
        "exit 3",
        inputs={"parameters": [{"name": "code"}]},
        retryStrategy={
            "limit": "2",
            "expression": "asInt(lastRetry.exitCode) == {{inputs.parameters.code}}",
        },
    )
    outer = steps(
        "outer",
        [
            {
                "name": "a",
                "template": "main",
                "arguments": {"parameters": [{"name": "code", "value": "3"}]},
            }
        ],
        [
            {
                "name": "b",
                "template": "main",
                "arguments": {"parameters": [{"name": "code", "value": "4"}]},
            }
        ],
    )
    outer["steps"][1][0]["when"] = "false"  # only a runs; b shows the other branch below
    status = site_b.wait(site_b.create(wf(outer, t)))
    retries = {n["displayName"]: n for n in status["nodes"].values() if n["type"] == "Retry"}
    # exit 3 == 3: retried until the limit
    assert retries["a"]["message"] == "No more retries left"
    assert len([n for n in site_b.pods(status) if n.startswith("a(")]) == 3

    outer["steps"] = [outer["steps"][1]]
    outer["steps"][0][0].pop("when")
    status = site_b.wait(site_b.create(wf(outer, t)))
    retries = {n["displayName"]: n for n in status["nodes"].values() if n["type"] == "Retry"}
    assert retries["b"]["message"] == "retryStrategy.expression evaluated to false"
    assert len(site_b.pods(status)) == 1


def test_retry_policy_defaults_and_transient_errors() -> None:
    # pkg/apis/workflow/v1alpha1/workflow_types.go RetryPolicyActual
    assert retry_policy({}) == "OnFailure"
    assert retry_policy({"expression": "true"}) == "Always"
    assert retry_policy({"retryPolicy": "OnError", "expression": "true"}) == "OnError"
    failed = {"phase": "Failed", "message": "Error (exit code 1)"}
    errored = {"phase": "Error", "message": "pod deleted"}
    # OnFailure does not retry an Error; OnError does not retry a Failed node.
    assert retry_decision({}, 0, errored) == ("pod deleted", None)
    assert retry_decision({"retryPolicy": "OnError"}, 0, failed)[0] == "Error (exit code 1)"
    assert retry_decision({"retryPolicy": "Always"}, 0, errored) == (None, None)
    # util/errors/errors.go: only transient messages are retried by OnTransientError.
    assert retry_decision({"retryPolicy": "OnTransientError"}, 0, failed)[0] is not None
    transient = {"phase": "Error", "message": "dial tcp: connect: connection refused"}
    assert retry_decision({"retryPolicy": "OnTransientError"}, 0, transient) == (None, None)
    # backoff: duration * factor^(attempt), capped; waited out only with a limit
    backoff = {"duration": "2s", "factor": 3, "cap": "10s"}
    assert retry_decision({"limit": 5, "backoff": backoff}, 1, failed) == (None, 6.0)
    assert retry_decision({"limit": 5, "backoff": backoff}, 2, failed) == (None, 10.0)
    assert retry_decision({"backoff": backoff}, 2, failed) == (None, None)


# workflow/executor/executor.go StageFiles: the source at /argo/staging/script, mode 0755,
# appended to the command.
@needs_bwrap
def test_script_source_is_an_executable_file_for_sh_c(site_b: Member) -> None:
    forms = [
        ("sh-c", "alpine:3.23", ["sh", "-c"], "echo from-sh-c"),
        ("bash", "bash:5", ["bash"], "echo from-bash"),
        ("python", "python:3", ["python"], "print('from-python')"),
        ("mode", "alpine:3.23", ["sh"], "stat -c %a /argo/staging/script"),
    ]
    templates = [
        {"name": n, "script": {"image": i, "command": c, "source": s}} for n, i, c, s in forms
    ]
    outer = steps("outer", [{"name": n, "template": n} for n, *_ in forms])
    status = site_b.wait(site_b.create(wf(outer, *templates)))
    assert status["phase"] == "Succeeded", status.get("message")
    results = {k: v["outputs"]["result"] for k, v in site_b.pods(status).items()}
    assert results == {
        "sh-c": "from-sh-c",
        "bash": "from-bash",
        "python": "from-python",
        "mode": "755",
    }


# The kubelet kills a pod past its activeDeadlineSeconds (a template's `timeout` sets it);
# workflow/controller/operator.go words it "Step exceeded its deadline". The tests' sandbox
# runs at a time scale of 1000: 20 simulated seconds are 20 real milliseconds.
@needs_bwrap
def test_sleeping_past_the_timeout_fails_whatever_the_time_scale(site_b: Member) -> None:
    late = sh("late", "sleep 8; sleep 8; echo done", timeout="10s")
    early = sh("early", "sleep 4; sleep 4; echo done", activeDeadlineSeconds=10)
    status = site_b.wait(site_b.create(wf(late)))
    assert status["phase"] == "Failed"
    (node,) = site_b.pods(status).values()
    assert node["message"] == "Step exceeded its deadline"
    status = site_b.wait(site_b.create(wf(early)))
    assert status["phase"] == "Succeeded", status.get("message")


@needs_bwrap
def test_a_simulated_step_fetching_a_url_is_refused_and_says_so(site_b: Member) -> None:
    t = {
        "name": "main",
        "container": {
            "image": "example.com/fetcher:1",
            "command": ["curl", "-sf", "https://example.com/data.csv"],
        },
    }
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Error"
    (node,) = site_b.pods(status).values()
    assert node["message"].startswith("simulated: image example.com/fetcher:1 not executable")
    assert "refused" in node["message"]


def test_simulated_outcome_follows_the_fleets_rules() -> None:
    rules = [
        {"match": "example.com/ok*", "outcome": "succeed"},
        {"match": "example.com/bad*", "outcome": "fail"},
        {"match": "example.com/no*", "outcome": "refuse"},
    ]
    fetch = {"command": ["sh", "-c"], "args": ["wget http://x/y"]}
    assert simulated.outcome([{"image": "example.com/ok:1", **fetch}], rules)[0] == "Succeeded"
    assert simulated.outcome([{"image": "example.com/bad:1"}], rules)[0] == "Failed"
    assert simulated.outcome([{"image": "example.com/no:1"}], rules)[0] == "Error"
    assert simulated.outcome([{"image": "other:1", **fetch}], rules)[0] == "Error"
    script = {"image": "other:1", "source": "git clone git@github.com:a/b.git"}
    assert simulated.outcome([script], rules)[0] == "Error"
    phase, message = simulated.outcome([{"image": "other:1", "command": ["run"]}], rules)
    assert (phase, message) == (
        "Succeeded",
        "simulated: image other:1 not executable here, assumed to succeed",
    )


# pkg/kubelet/kubelet_pods.go managedHostsFileContent: every container has a hosts file of
# the kubelet's (test/e2e/functional/dag-argument-passing.yaml reads it as an output); and an
# output under a volume mounted inside another is read from the inner one
# (test/e2e/functional/pns-output-params.yaml).
@needs_bwrap
def test_hosts_file_and_nested_mounts_as_outputs(site_b: Member) -> None:
    t = sh("main", "echo -n B > /mnt/outer/inner/B && echo -n D > /mnt/outer/D")
    t["container"]["volumeMounts"] = [
        {"name": "outer", "mountPath": "/mnt/outer"},
        {"name": "inner", "mountPath": "/mnt/outer/inner"},
    ]
    t["outputs"] = {
        "parameters": [
            {"name": p, "valueFrom": {"path": path}}
            for p, path in (
                ("hosts", "/etc/hosts"),
                ("B", "/mnt/outer/inner/B"),
                ("D", "/mnt/outer/D"),
            )
        ]
    }
    volumes = [{"name": "outer", "emptyDir": {}}, {"name": "inner", "emptyDir": {}}]
    status = site_b.wait(site_b.create(wf(t, volumes=volumes)))
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_b.pods(status).values()
    values = {p["name"]: p["value"] for p in node["outputs"]["parameters"]}
    assert values["B"] == "B" and values["D"] == "D"
    assert values["hosts"].startswith("# Kubernetes-managed hosts file.")


# workflow/controller/operator.go: a claim the API server refuses is `pvc create error`
# (markWorkflowError) - test/e2e/expectedfailures/volumes-pvc-fail-event.yaml.
@needs_bwrap
def test_an_invalid_claim_template_errors_the_workflow(site_b: Member) -> None:
    claim = {"metadata": {"name": "work"}, "spec": {"accessModes": ["InvalidAccessMode"]}}
    status = site_b.wait(site_b.create(wf(sh("main", "true"), volumeClaimTemplates=[claim])))
    assert status["phase"] == "Error"
    assert status["message"].startswith("pvc create error: PersistentVolumeClaim")
    assert 'Unsupported value: "InvalidAccessMode"' in status["message"]


# govaluate's IN over a parenthesised list, after the `{{= }}` tags are filled
# (test/e2e/functional/steps-when-expr-filter.yaml, TestStepsWhenExprFilter).
@needs_bwrap
def test_when_in_a_list_after_substitution(site_b: Member) -> None:
    outer = steps(
        "outer",
        [
            {
                "name": "fst",
                "template": "run",
                "when": "\"{{= get(item, 'type') ?? 'always' }}\" in "
                "(\"{{= ['always', 'test'] | join('\",\"') }}\",\"\")",
                "withParam": '[{"type": ""}, {"type": "test"}, {"type": "other"}, {}]',
            }
        ],
    )
    status = site_b.wait(site_b.create(wf(outer, sh("run", "true"))))
    assert status["phase"] == "Succeeded", status.get("message")
    phases = sorted(n["phase"] for n in status["nodes"].values() if n["type"] in ("Pod", "Skipped"))
    assert phases == ["Skipped", "Succeeded", "Succeeded", "Succeeded"]


# workflow/controller/operator.go mergedTemplateDefaultsInto
# (test/e2e/functional/template-default-image.yaml); alpine's sh is busybox ash, with $RANDOM
# (test/e2e/functional/dag-with-retries.yaml).
@needs_bwrap
def test_template_defaults_and_alpine_shell(site_b: Member) -> None:
    t = {"name": "main", "container": {"args": ["echo ${RANDOM:+random} $0"]}}
    defaults = {"container": {"image": "alpine:3.23", "command": ["sh", "-c"]}, "script": {}}
    status = site_b.wait(site_b.create(wf(t, templateDefaults=defaults)))
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "random sh"


# util/template/simple_template.go and workflow/common/util.go: a skipped node's output with no
# default is an absent optional; an argument naming it takes the consumer's input default, or
# errors, and an errored step group fails the steps template (steps.go)
# (test/e2e/functional/steps-skipped-*.yaml, TestStepsSkipped*).
@needs_bwrap
def test_absent_optionals(site_b: Member) -> None:
    producer = sh("produce", "echo v > /tmp/out")
    producer["outputs"] = {"parameters": [{"name": "msg", "valueFrom": {"path": "/tmp/out"}}]}
    consume = sh("consume", "echo {{inputs.parameters.in}}")
    consume["inputs"] = {"parameters": [{"name": "in", "default": "fallback"}]}
    strict = sh("strict", "echo {{inputs.parameters.in}}")
    strict["inputs"] = {"parameters": [{"name": "in"}]}
    ref = {"parameters": [{"name": "in", "value": "{{steps.p.outputs.parameters.msg}}"}]}

    def run(consumer: str) -> dict[str, Any]:
        main = steps(
            "main",
            [{"name": "p", "template": "produce", "when": "false"}],
            [{"name": "c", "template": consumer, "arguments": ref}],
        )
        return site_b.wait(site_b.create(wf(main, producer, consume, strict)))

    status = run("consume")
    assert status["phase"] == "Succeeded", status.get("message")
    assert site_b.pods(status)["c"]["outputs"]["result"] == "fallback"
    status = run("strict")
    assert status["phase"] == "Failed"
    assert status["message"] == (
        "inputs.parameters.in: argument references an absent optional "
        "(skipped/omitted node output with no default)"
    )


# workflow/controller/scope.go resolveArtifact: an argument's subPath is appended to the key
# of the artifact it names (ArtifactLocation.AppendToKey).
@needs_bwrap
def test_artifact_sub_path(site_b: Member) -> None:
    def producer(name: str, archive: dict[str, Any] | None) -> dict[str, Any]:
        t = sh(name, "mkdir -p /tmp/out/sub && echo inner > /tmp/out/sub/f.txt")
        art: dict[str, Any] = {"name": "out", "path": "/tmp/out"}
        if archive is not None:
            art["archive"] = archive
        t["outputs"] = {"artifacts": [art]}
        return t

    consume = sh("consume", "cat /tmp/in/f.txt")
    consume["inputs"] = {"artifacts": [{"name": "data", "path": "/tmp/in"}]}

    def run(producer_name: str) -> dict[str, Any]:
        arg = {
            "name": "data",
            "from": "{{steps.p.outputs.artifacts.out}}",
            "subPath": "{{workflow.parameters.dir}}",
        }
        main = steps(
            "main",
            [{"name": "p", "template": producer_name}],
            [{"name": "c", "template": "consume", "arguments": {"artifacts": [arg]}}],
        )
        body = wf(
            main,
            producer("plain", {"none": {}}),
            producer("tarball", None),
            consume,
            arguments={"parameters": [{"name": "dir", "value": "sub"}]},
        )
        return site_b.wait(site_b.create(body))

    status = run("plain")
    assert status["phase"] == "Succeeded", status.get("message")
    assert site_b.pods(status)["c"]["outputs"]["result"] == "inner"
    status = run("tarball")
    assert status["phase"] in ("Failed", "Error")
    assert "NoSuchKey" in site_b.pods(status)["c"]["message"]


# workflow/controller/operator.go executeScript: the source's path is appended to the args; a
# script without a source runs as a container (test/e2e/functional/loops-empty-param.yaml).
@needs_bwrap
def test_script_path_after_args_and_script_without_source(site_b: Member) -> None:
    with_args = {
        "name": "with-args",
        "script": {"image": "alpine:3.23", "command": ["sh"], "args": ["-e"], "source": "echo $-"},
    }
    no_source = {"name": "no-source", "script": {"image": "alpine:3.23", "command": ["echo", "[]"]}}
    outer = steps(
        "outer", [{"name": "a", "template": "with-args"}, {"name": "b", "template": "no-source"}]
    )
    status = site_b.wait(site_b.create(wf(outer, with_args, no_source)))
    assert status["phase"] == "Succeeded", status.get("message")
    results = {k: v["outputs"]["result"] for k, v in site_b.pods(status).items()}
    assert "e" in results["a"]
    assert results["b"] == "[]"


# An input artifact that cannot load fails the step even when its path is under a system
# folder (test/e2e/expectedfailures/input-artifact-not-optional.yaml).
@needs_bwrap
def test_input_artifact_under_a_system_folder_still_loads(site_b: Member) -> None:
    t = sh("main", "echo ran")
    t["inputs"] = {"artifacts": [{"name": "k", "path": "/bin/kubectl", "http": {"url": ""}}]}
    status = site_b.wait(site_b.create(wf(t)))
    assert status["phase"] == "Error"
    assert status["message"].startswith('Get "": ')


# Sidecars run beside the main container and share its volumes; they are killed when it ends
# (test/e2e/functional/sidecar-volumes.yaml).
@needs_bwrap
def test_sidecar_shares_volumes_and_is_stopped(site_b: Member) -> None:
    t = sh(
        "main", "for i in 1 2 3 4 5; do [ -f /mnt/vol/f ] && break; sleep 1; done; cat /mnt/vol/f"
    )
    t["container"]["volumeMounts"] = [{"name": "v", "mountPath": "/mnt/vol"}]
    t["sidecars"] = [
        {
            "name": "side",
            "image": "alpine:3.23",
            "command": ["sh", "-c", "echo from-sidecar > /mnt/vol/f; sleep 3600"],
            "volumeMounts": [{"name": "v", "mountPath": "/mnt/vol"}],
        }
    ]
    status = site_b.wait(site_b.create(wf(t, volumes=[{"name": "v", "emptyDir": {}}])))
    assert status["phase"] == "Succeeded", status.get("message")
    (node,) = site_b.pods(status).values()
    assert node["outputs"]["result"] == "from-sidecar"
