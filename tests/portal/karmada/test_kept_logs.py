"""The kept copy of a log is tailed as the kubelet tails a live one (``tailLines``), so that a
tailed read after the cleanup gives what it gave before: compared with the executing
sandbox's member (``sandbox.argo.site``, which cuts lines as the kubelet does for logs whose
lines end in ``\\n``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from portal.karmada.kept_logs import tail

LINES = st.lists(st.text(alphabet="ab ≥\r\t", max_size=5), max_size=8)


def kubelet_tail(text: str, n: int) -> str:
    lines = text.split("\n")
    whole = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return "".join(whole[-n:]) if n > 0 else ""


@given(LINES, st.booleans(), st.integers(min_value=0, max_value=10))
def test_it_cuts_lines_as_the_kubelet_does(lines: list[str], final_newline: bool, n: int) -> None:
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    assert tail(text.encode(), n) == kubelet_tail(text, n).encode()


def test_it_keeps_a_last_line_without_newline_and_empty_lines() -> None:
    assert tail(b"a\n\nb\nno newline", 2) == b"b\nno newline"
    assert tail(b"a\n\n\n", 2) == b"\n\n"
    assert tail(b"a\nb\n", 5) == b"a\nb\n"
    assert tail(b"", 3) == b""
    assert tail(b"a\nb\n", 0) == b""
