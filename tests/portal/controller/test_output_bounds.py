"""What the portal keeps of a step's outputs whatever a member reports: a parameter over the
limit is left out with a message that names it and the limit; a result keeps its last bytes."""

from __future__ import annotations

from typing import Any, cast

import pytest

from portal.choices import UnitPhase
from portal.controller.bindings import binding_observe
from portal.models import UnitRun
from portal.outputs import bound_outputs, page, page_request, preview
from tests.factories import UnitRunFactory


def test_a_parameter_over_the_limit_is_left_out_with_a_message() -> None:
    outputs = {
        "parameters": [{"name": "big", "value": "a" * 2000}, {"name": "small", "value": "ok"}],
        "exitCode": "0",
    }
    kept, problem = bound_outputs(outputs, 1024)
    assert kept["parameters"] == [{"name": "small", "value": "ok"}]
    assert kept["exitCode"] == "0"
    assert problem == (
        "output parameter big is 2000 bytes, more than the 1024 bytes an output parameter may "
        "hold; it was not stored (pass large values as an output artifact)"
    )


def test_a_parameter_at_the_limit_is_kept_and_sizes_count_bytes() -> None:
    kept, problem = bound_outputs({"parameters": [{"name": "p", "value": "é" * 512}]}, 1024)
    assert problem == "" and kept["parameters"][0]["value"] == "é" * 512
    _, problem = bound_outputs({"parameters": [{"name": "p", "value": "é" * 513}]}, 1024)
    assert "1026 bytes" in problem


def test_a_result_keeps_its_last_bytes_as_argo_does() -> None:
    kept, problem = bound_outputs({"result": "x" * 100 + "tail"}, 10)
    assert problem == ""
    assert kept["result"] == "xxxxxxtail"


def _binding(workflow: str, outputs: dict[str, Any]) -> dict[str, Any]:
    node = {"id": workflow, "phase": "Succeeded", "outputs": outputs}
    return {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "resource": {"kind": "Workflow", "name": workflow},
            "clusters": [{"name": "site-a"}],
        },
        "status": {
            "aggregatedStatus": [
                {
                    "clusterName": "site-a",
                    "status": {
                        "phase": "Succeeded",
                        "startedAt": "2026-01-01T00:00:00Z",
                        "finishedAt": "2026-01-01T00:01:00Z",
                        "nodes": {workflow: node},
                    },
                }
            ]
        },
    }


@pytest.mark.django_db
def test_a_member_reporting_a_parameter_over_the_bound_fails_the_unit(settings: Any) -> None:
    settings.PORTAL_MAX_PARAMETER_BYTES = 1000
    unit = cast(UnitRun, UnitRunFactory(phase=UnitPhase.RUNNING, workflow_name="wf-big-1"))
    outputs = {
        "parameters": [{"name": "big", "value": "a" * 5000}, {"name": "ok", "value": "1"}],
        "result": "r" * 3000,
    }
    binding_observe(_binding("wf-big-1", outputs))
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.FAILED
    assert unit.message.startswith("output parameter big is 5000 bytes, more than the 1000")
    assert unit.outputs["parameters"] == [{"name": "ok", "value": "1"}]
    assert unit.outputs["result"] == "r" * 1000


@pytest.mark.django_db
def test_a_member_reporting_parameters_within_the_bound_succeeds(settings: Any) -> None:
    settings.PORTAL_MAX_PARAMETER_BYTES = 1000
    unit = cast(UnitRun, UnitRunFactory(phase=UnitPhase.RUNNING, workflow_name="wf-small-1"))
    binding_observe(_binding("wf-small-1", {"parameters": [{"name": "p", "value": "a" * 1000}]}))
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.SUCCEEDED and unit.message == ""
    assert unit.outputs["parameters"] == [{"name": "p", "value": "a" * 1000}]


def test_a_preview_cuts_long_values_and_says_how_long_they_are() -> None:
    shown = preview(
        {
            "parameters": [{"name": "a", "value": "x" * 10}, {"name": "b", "value": "y"}],
            "result": "z" * 7,
        },
        4,
    )
    assert shown == {
        "parameters": [
            {"name": "a", "value": "xxxx", "truncated": True, "size": 10},
            {"name": "b", "value": "y"},
        ],
        "result": "zzzz",
        "resultTruncated": True,
        "resultSize": 7,
    }
    assert preview(None, 4) == {}


def test_pages_join_to_the_whole_value() -> None:
    value = "0123456789"
    first = page(value, 0, 4)
    assert (first["value"], first["next_offset"], first["size"]) == ("0123", 4, 10)
    last = page(value, 8, 4)
    assert (last["value"], last["next_offset"]) == ("89", None)


def test_a_page_request_names_each_bad_field() -> None:
    _, errors = page_request({"limit": "0", "offset": "-1"}, 100)
    assert {f for f, _m in errors} == {"parameter", "offset", "limit"}
    wanted, errors = page_request({"result": "1", "limit": "50"}, 100)
    assert errors == [] and (wanted.parameter, wanted.offset, wanted.limit) == (None, 0, 50)
    _, errors = page_request({"parameter": "p", "result": "1"}, 100)
    assert [f for f, _m in errors] == ["result"]


def test_a_parameter_holding_nul_is_left_out_and_named_and_other_nuls_are_replaced() -> None:
    outputs = {
        "parameters": [{"name": "raw", "value": "a\x00b"}, {"name": "ok", "value": "fine"}],
        "result": "x\x00y",
        "artifacts": [{"name": "n\x00", "s3": {"key": "k\x00"}}],
    }
    kept, problem = bound_outputs(outputs, 1024)
    assert kept["parameters"] == [{"name": "ok", "value": "fine"}]
    assert kept["result"] == "x\ufffdy"
    assert kept["artifacts"] == [{"name": "n\ufffd", "s3": {"key": "k\ufffd"}}]
    assert problem == (
        "output parameter raw holds NUL bytes (U+0000), which the portal cannot store or pass "
        "on; it was not stored (pass binary data as an output artifact)"
    )
    assert "\x00" not in repr(kept)


@pytest.mark.django_db
def test_a_member_reporting_nul_bytes_ends_the_unit_in_postgresql() -> None:
    """PostgreSQL's jsonb refuses U+0000: before, the fold failed and was retried forever,
    the unit Running for good."""
    unit = cast(UnitRun, UnitRunFactory(phase=UnitPhase.RUNNING, workflow_name="wf-nul-1"))
    binding = _binding(
        "wf-nul-1", {"parameters": [{"name": "raw", "value": "a\x00b"}], "result": "x\x00y"}
    )
    binding["status"]["aggregatedStatus"][0]["status"]["message"] = "bad\x00news"
    binding_observe(binding)
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.FAILED
    assert unit.message.startswith("output parameter raw holds NUL bytes (U+0000)")
    assert unit.outputs["parameters"] == [] and unit.outputs["result"] == "x\ufffdy"
    unit.phase = UnitPhase.RUNNING
    unit.save()
    binding = _binding("wf-nul-1", {"result": "only\x00stdout"})
    binding["metadata"]["resourceVersion"] = "9"
    binding["status"]["aggregatedStatus"][0]["status"]["phase"] = "Failed"
    binding["status"]["aggregatedStatus"][0]["status"]["message"] = "bad\x00news"
    binding_observe(binding)
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.FAILED and unit.message == "bad\ufffdnews"
    assert unit.outputs["result"] == "only\ufffdstdout"
