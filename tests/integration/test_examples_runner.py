"""``make examples`` on a small fast subset: Argo's examples through the portal end to end
(REST submit, the executing sandbox, wait), each reaching Argo's outcome."""

from __future__ import annotations

import shutil

import pytest

from tests import examples_runner

pytestmark = [pytest.mark.integration]

SUBSET = [
    "arguments-parameters.yaml",
    "parallel-workflow.yaml",
    "dag-conditional-parameters.yaml",
    # An approval gate: the runner resumes it as a user would.
    "suspend-template.yaml",
]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="--execute needs bubblewrap")
def test_a_subset_of_argos_examples_reaches_argos_outcome_through_the_portal(capsys) -> None:
    # Time scale 10, as `make examples` is measured: the suspend's 20 s delay is not waited
    # in wall time; outcomes are the same at any scale.
    argv = ["--only", *SUBSET, "--strict", "--timeout", "300", "--time-scale", "10"]
    assert examples_runner.main(argv) == 0
    out = capsys.readouterr().out
    assert f"{len(SUBSET)}/{len(SUBSET)} examples that ran reach Argo's outcome" in out, out
    for name in SUBSET:
        assert name in out


def test_expectations_cover_every_example_and_name_portal_outcomes() -> None:
    expect = examples_runner.expectations()
    names = {p.name for p in examples_runner.EXAMPLES.glob("*.yaml")}
    if not names:
        pytest.skip("the reference examples are not here")
    assert names <= set(expect), sorted(names - set(expect))
    for entry in expect.values():
        assert examples_runner.expected_of(entry) in {
            "Succeeded",
            "Failed",
            "Error",
            "Refused",
            "not run",
        }
