"""What the portal keeps of a step's outputs whatever a member reports: a parameter over the
limit is left out with a message that names it and the limit; a result keeps its last bytes."""

from __future__ import annotations

from portal.outputs import bound_outputs


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
